#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian 12 machine, then run the whole suite.
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then
    bash scripts/install-system-deps.sh
    bash scripts/install-web-deps.sh
else
    echo "not root: skipping system packages (QEMU, xfsprogs, ...); tests that need them will skip with a reason" >&2
fi
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
if [ -x scripts/install-vmm-deps.sh ] || [ -f scripts/install-vmm-deps.sh ]; then
    if [ "$(id -u)" = 0 ]; then bash scripts/install-vmm-deps.sh; fi
fi
exec python3 -m pytest "$@"
