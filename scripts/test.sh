#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian 12 machine, run the code-health gates
# (scripts/check.sh), then the whole suite in parallel (pytest-xdist; tiers and options: docs/testing.md).
# Usage: bash scripts/test.sh [extra pytest args]     e.g. -q, -m unit, tests/manifest
# FORKD_TEST_WORKERS sets the number of pytest-xdist workers (default below, measured in docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then
    bash scripts/install-system-deps.sh
    bash scripts/install-web-deps.sh
else
    echo "not root: skipping system packages (QEMU, xfsprogs, ...); tests that need them will skip with a reason" >&2
fi
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
if [ "$(id -u)" = 0 ]; then bash scripts/install-vmm-deps.sh; fi

# Python may cache bytecode and pytest its assertion-rewritten test modules (each worker collects the whole
# suite: without the cache that is ~10 s of CPU per worker on every run).
unset PYTHONDONTWRITEBYTECODE

gates=0
bash scripts/check.sh || gates=$?

suite=0
python3 -m pytest -n "${FORKD_TEST_WORKERS:-4}" --dist loadgroup --durations=25 "$@" || suite=$?
if [ "$gates" != 0 ]; then
    echo "the suite ran, but the code-health gates failed (scripts/check.sh, above)" >&2
    exit 1
fi
exit "$suite"
