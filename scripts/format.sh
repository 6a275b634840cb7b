#!/usr/bin/env bash
# Format the whole tree with ruff's formatter (configuration: [tool.ruff] in pyproject.toml).
# Usage: bash scripts/format.sh          rewrite files in place
#        bash scripts/format.sh --check  only report what would change (exit 1 if anything would)
# scripts/check.sh (ruff format --check) keeps the tree formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--check" ]; then
    exec python3 -m ruff format --check .
fi
python3 -m ruff format .
# the formatter can leave an import block or a fixable lint finding behind: settle them too
python3 -m ruff check --fix --quiet . || true
python3 -m ruff check .
