# Sourced by the install-*.sh scripts: install Debian packages only when missing.
#   apt_install_missing LABEL PKG...   installs what is missing (apt-get update first, once);
#                                      sets APT_INSTALLED to what it installed; exits 1 when
#                                      something is missing and we are not root
#   apt_update_once                    apt-get update, at most once per script run

APT_UPDATED=0
APT_INSTALLED=()

apt_update_once() {
    if [ "$APT_UPDATED" = 0 ]; then
        apt-get update -qq
        APT_UPDATED=1
    fi
}

apt_install_missing() {
    local label=$1
    shift
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    APT_INSTALLED=()
    if [ "${#missing[@]}" -eq 0 ]; then
        echo "$label: already installed: $*" >&2
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "$label: need root to install: ${missing[*]}" >&2
        exit 1
    fi
    echo "$label: installing ${missing[*]}" >&2
    apt_update_once
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    APT_INSTALLED=("${missing[@]}")
}
