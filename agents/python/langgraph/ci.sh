#!/usr/bin/env bash
# Lint, type-check and test dex-agents-langgraph. Usage: ./ci.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
uv sync --locked --quiet
example=../../../examples/langgraph_support_desk
uv run --locked ruff check src tests
uv run --locked ruff format --check src tests
uv run --locked mypy src tests
# The example needs this venv (LangChain): the root checks lint it but leave its type
# check to this script.
uv run --locked mypy "$example"
DEXCLI="$PWD/.venv/bin/dexcli" uv run --locked pytest "$@"
