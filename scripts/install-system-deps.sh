#!/usr/bin/env bash
# Debian packages the tests and the demo use. Idempotent; run as root.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt-lib.sh"
apt_install_missing install-system-deps qemu-system-x86 busybox-static cpio xfsprogs btrfs-progs zstd openssl \
    postgresql `# a throwaway cluster per test run (tests/services/postgres.py)` \
    skopeo `# the OCI interop tests (tests/e2e/oci, tests/e2e/test_skopeo.py)` \
    podman `# the OCI interop tests: push, mount, pull (tests/e2e/oci/test_podman.py)` \
    fuse3 `# fork --lazy: libfuse and fusermount3 for the lazily filled memory file (forkd_client/lazy)` \
    e2fsprogs `# mkfs.ext4 -d and e2fsck: rootfs images built without mounting (forkd_client/images/ext4.py)` \
    mmdebstrap `# Debian userlands for from-debian (forkd_client/images/debian.py)` \
    umoci `# the independent reference extraction the layer applier is compared with (tests/forkd_client/images)` \
    docker-registry `# a registry with htpasswd Basic auth for the image fetch tests (no service is started)` \
    haproxy `# the reference load balancer in front of hub replicas (deploy/haproxy.cfg, tests/e2e/test_operations_*)` \
    rclone `# the object-store copy of the documented backup and restore (docs/operations.md, tests/e2e)`
# docker-registry's package may start a service where systemd runs; tests start their own on a free port.
if [[ " ${APT_INSTALLED[*]} " == *" docker-registry "* ]] && command -v systemctl >/dev/null 2>&1 \
    && systemctl is-active --quiet docker-registry 2>/dev/null; then
    systemctl stop docker-registry || true
fi
# haproxy's package starts the distribution's default service where systemd runs; tests start their own.
if [[ " ${APT_INSTALLED[*]} " == *" haproxy "* ]] && command -v systemctl >/dev/null 2>&1 \
    && systemctl is-active --quiet haproxy 2>/dev/null; then
    systemctl stop haproxy || true
fi
