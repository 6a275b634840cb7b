"""Where a built root filesystem came from, as annotation keys (recorded on the baked snapshot) and one line.

Images: ``org.opencontainers.image.base.digest`` (the linux/amd64 manifest used, or for a docker-archive its
config digest), ``org.opencontainers.image.base.name`` (the reference as given), ``dev.forkd.image.index.digest``
(when the reference named an index). Debian: ``dev.forkd.debian.suite``, ``dev.forkd.debian.variant``,
``dev.forkd.debian.packages`` (``name=version`` of each requested package, comma-joined).
"""

from __future__ import annotations

from collections.abc import Mapping

BASE_DIGEST = "org.opencontainers.image.base.digest"
BASE_NAME = "org.opencontainers.image.base.name"
INDEX_DIGEST = "dev.forkd.image.index.digest"
DEBIAN_SUITE = "dev.forkd.debian.suite"
DEBIAN_VARIANT = "dev.forkd.debian.variant"
DEBIAN_PACKAGES = "dev.forkd.debian.packages"
#: every key a build records; a snapshot with one of them was baked from that source
SOURCE_KEYS = (BASE_DIGEST, BASE_NAME, INDEX_DIGEST, DEBIAN_SUITE, DEBIAN_VARIANT, DEBIAN_PACKAGES)


def describe_source(annotations: Mapping[str, str]) -> str | None:
    """One line naming the image or the Debian userland ``annotations`` record, None if neither."""
    if BASE_NAME in annotations or BASE_DIGEST in annotations:
        name = annotations.get(BASE_NAME, "an OCI image")
        digest = annotations.get(BASE_DIGEST)
        return f"image {name}" + (f" ({digest})" if digest else "")
    if DEBIAN_SUITE in annotations:
        packages = annotations.get(DEBIAN_PACKAGES, "")
        variant = annotations.get(DEBIAN_VARIANT, "minbase")
        return f"Debian {annotations[DEBIAN_SUITE]} ({variant})" + (f": {packages}" if packages else "")
    return None
