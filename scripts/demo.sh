#!/usr/bin/env bash
# The main job on the embedded default: a hub (SQLite + filesystem blobs), a real QEMU microVM
# snapshot chain, push, remove, pull back verified, fork 5 copy-on-write children, summary.
# Usage: bash scripts/demo.sh [--keep-workdir]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ]; then
    bash scripts/install-system-deps.sh
elif ! command -v qemu-system-x86_64 >/dev/null || [ ! -x /bin/busybox ]; then
    echo "missing system packages; as root run:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends qemu-system-x86 busybox-static cpio" >&2
    exit 1
fi
python3 -m pip install --quiet --disable-pip-version-check -e .
exec python3 scripts/demo.py "$@"
