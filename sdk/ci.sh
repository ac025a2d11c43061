#!/usr/bin/env bash
# Lint, type-check and test the SDK. Usage: ./ci.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd .. && pwd)
uv sync --locked --project "$root" --quiet
uv run --project "$root" ruff check src tests
uv run --project "$root" ruff format --check src tests
uv run --project "$root" mypy --config-file "$root/pyproject.toml" src tests
uv run --project "$root" pytest "$@"
