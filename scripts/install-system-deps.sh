#!/usr/bin/env bash
# Debian packages the tests and the demo use. Idempotent; run as root.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt-lib.sh"
apt_install_missing install-system-deps qemu-system-x86 busybox-static cpio xfsprogs btrfs-progs zstd openssl \
    postgresql `# a throwaway cluster per test run (tests/services/postgres.py)` \
    skopeo `# the OCI interop tests (tests/e2e/oci, tests/e2e/test_skopeo.py)` \
    fuse3 `# fork --lazy: libfuse and fusermount3 for the lazily filled memory file (forkd_client/lazy)`
