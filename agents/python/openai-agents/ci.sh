#!/usr/bin/env bash
# Lint, type-check and test dex-agents-openai-agents. Usage: ./ci.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
uv sync --locked --quiet
uv run --no-sync ruff check src tests
uv run --no-sync ruff format --check src tests
uv run --no-sync mypy src tests
DEXCLI="$PWD/.venv/bin/dexcli" uv run --no-sync pytest "$@"
