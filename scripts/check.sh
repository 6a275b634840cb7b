#!/usr/bin/env bash
# The code-health gates (docs/decisions/0008-code-health-gates.md), apart from the test suite: lint, format,
# types, the import-linter contracts, and the pure checks that the docs and the tree agree (the unit tier of
# tests/test_*.py: they read files and start nothing). Every gate runs even when one fails; the exit status
# says whether all passed.
# Usage: bash scripts/check.sh          (about a minute; .ci/run runs it through scripts/test.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset PYTHONDONTWRITEBYTECODE  # mypy and pytest cache what they parsed (__pycache__, .mypy_cache)

failed=()
gate() {
    local name="$1"
    shift
    echo "== $name: $*"
    if ! "$@"; then
        failed+=("$name")
    fi
}

gate "ruff check" python3 -m ruff check --output-format concise .
gate "ruff format" python3 -m ruff format --check .
gate "mypy" python3 -m mypy
gate "lint-imports" lint-imports
gate "tree checks" python3 -m pytest -q -p no:xdist -p no:cacheprovider -m unit tests/test_*.py

if [ "${#failed[@]}" -gt 0 ]; then
    echo "code-health gates failed: ${failed[*]}" >&2
    exit 1
fi
echo "code-health gates passed"
