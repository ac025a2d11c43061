#!/usr/bin/env bash
# Lint, type-check and test dex-agents-openai-agents. Usage: ./ci.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
uv sync --locked --quiet
uv run --no-sync ruff check src tests
uv run --no-sync ruff format --check src tests
uv run --no-sync mypy src tests
# The example needs this venv: the root checks lint it but leave its type check here.
uv run --no-sync mypy ../../../examples/openai-agents_support_desk
DEXCLI="$PWD/.venv/bin/dexcli" uv run --no-sync pytest "$@"
