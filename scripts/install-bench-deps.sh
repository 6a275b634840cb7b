#!/usr/bin/env bash
# Debian packages the benchmarks in bench/ use as peers and tools. Idempotent; run as root.
#   docker-registry  distribution 2.8 (the OCI registry peer; run by hand, no service is started)
#   skopeo           the OCI client peer
#   wrk              HTTP load generator for bench/manifest_rps.py (an httpx fallback exists)
#   xfsprogs         mkfs.xfs for the reflink disk-usage part of bench/chain_pull_vs_skopeo.py
# `apt-get update` runs only when something is missing.
set -euo pipefail
PKGS=(docker-registry skopeo wrk xfsprogs)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "bench deps already installed: ${PKGS[*]}" >&2
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing: ${missing[*]}; run this script as root to install them" >&2
    exit 1
fi
echo "installing: ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The Debian package ships no running service here (no systemd), but stop one if a unit started it,
# so benchmarks always start their own registry on a free port.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
    systemctl stop docker-registry || true
fi
echo "installed: ${missing[*]}" >&2
