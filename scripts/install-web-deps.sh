#!/usr/bin/env bash
# What the real-browser test of the web catalog needs: Debian's Chromium (driven by Playwright
# with executable_path=/usr/bin/chromium; Playwright's own browser downloads are not used) and a
# font with the glyphs the pages use. Idempotent; run as root.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/apt-lib.sh"
apt_install_missing install-web-deps chromium fonts-dejavu-core
