#!/usr/bin/env bash
# Lint, type-check and test dex-agents-pydantic-ai. Usage: ./ci.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
uv sync --locked --quiet
uv run --locked ruff check src tests
uv run --locked ruff format --check src tests
uv run --locked mypy src tests
# The example needs this venv: the root checks lint it but leave its type check here.
uv run --locked mypy ../../../examples/pydantic-ai_support_desk
DEXCLI="$PWD/.venv/bin/dexcli" uv run --locked pytest "$@"
