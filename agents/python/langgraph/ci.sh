#!/usr/bin/env bash
# Lint, type-check and test dex-agents-langgraph. Usage: ./ci.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
uv sync --locked --quiet
uv run --locked ruff check src tests
uv run --locked ruff format --check src tests
uv run --locked mypy src tests
DEXCLI="$PWD/.venv/bin/dexcli" uv run --locked pytest "$@"
