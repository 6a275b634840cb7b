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

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

updated=0
apt_update() {
    if [ "$updated" = 0 ]; then
        apt-get update -qq
        updated=1
    fi
}

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-vmm-deps: need root to install: ${missing[*]}" >&2
        exit 1
    fi
    echo "install-vmm-deps: installing ${missing[*]}"
    apt_update
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "install-vmm-deps: ${PACKAGES[*]} already installed"
fi

# The guest kernel is resolved through apt-cache (never pinned); that needs package lists.
if ! apt-cache depends linux-image-cloud-amd64 2>/dev/null | grep -q "Depends: linux-image-"; then
    apt_update
fi

cd "$REPO"
PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m vmm.guest build
