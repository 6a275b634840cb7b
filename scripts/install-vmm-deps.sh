#!/usr/bin/env bash
# Install what the vmm package's real-VM tests need, then build the test guest into the cache.
#
#   sudo scripts/install-vmm-deps.sh        (CI runs it as root before the tests)
#
# Idempotent: packages are installed only when missing (apt-get update only then), and the guest
# build is skipped when the cache already holds a matching one. The guest lands in
# $FORKD_GUEST_CACHE (default $XDG_CACHE_HOME/forkd/guest, i.e. ~/.cache/forkd/guest).
set -euo pipefail

PACKAGES=(qemu-system-x86 busybox-static cpio xfsprogs)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
export DEBIAN_FRONTEND=noninteractive

source "$REPO/scripts/apt-lib.sh"
apt_install_missing install-vmm-deps "${PACKAGES[@]}"

# The guest kernel is resolved through apt-cache (never pinned); that needs package lists.
if ! apt-cache depends linux-image-cloud-amd64 2>/dev/null | grep -q "Depends: linux-image-"; then
    apt_update_once
fi

cd "$REPO"
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m vmm.guest build
