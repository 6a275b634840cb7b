#!/usr/bin/env bash
# Debian packages the benchmarks in bench/ use as peers and tools. Idempotent; run as root.
#   docker-registry  distribution 2.8 (the OCI registry peer; run by hand, no service is started)
#   skopeo           the OCI client peer
#   wrk              HTTP load generator for bench/manifest_rps.py (an httpx fallback exists)
#   xfsprogs         mkfs.xfs for the reflink disk-usage part of bench/chain_pull_vs_skopeo.py
#   iproute2         tc, to shape loopback like a 1 Gbit/s link in bench/chain_pull_vs_skopeo.py
# `apt-get update` runs only when something is missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt-lib.sh"
apt_install_missing install-bench-deps docker-registry skopeo wrk xfsprogs iproute2
[ "${#APT_INSTALLED[@]}" -gt 0 ] || exit 0
# The Debian package ships no running service here (no systemd), but stop one if a unit started it,
# so benchmarks always start their own registry on a free port.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet docker-registry 2>/dev/null; then
    systemctl stop docker-registry || true
fi
echo "installed: ${APT_INSTALLED[*]}" >&2
