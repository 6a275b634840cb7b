#!/usr/bin/env bash
# The main job on the embedded default: a hub (SQLite + filesystem blobs), a Python base baked from Debian
# packages in a real QEMU microVM, a numpy link, push, remove, pull back verified, fork 5 copy-on-write
# children that each print their own numpy random number, summary.
# Usage: bash scripts/demo.sh [--keep-workdir]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
    # building a root filesystem keeps each file's owner (and mmdebstrap runs as root): the demo needs root
    echo "demo: run as root (sudo bash scripts/demo.sh): it installs QEMU and mmdebstrap, and builds a Debian" >&2
    echo "      root filesystem whose files keep their owners" >&2
    exit 1
fi
bash scripts/install-system-deps.sh
python3 -m pip install --quiet --disable-pip-version-check -e .
exec python3 scripts/demo.py "$@"
