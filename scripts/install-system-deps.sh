#!/usr/bin/env bash
# Debian packages the tests and the demo use. Idempotent; run as root.
set -euo pipefail
PKGS=(qemu-system-x86 busybox-static cpio xfsprogs btrfs-progs zstd)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing: ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
