"""Real root filesystems for the guest: OCI images and Debian packages → a cached, deterministic ext4 image.

One entry point, :func:`build_rootfs` (``build.py``), over small modules, each with its contract and errors
in its docstring (the whole error tree: ``errors.py``; what is supported and why: docs/images.md):

    reference.py   oci:DIR[:tag|@digest], docker-archive:FILE, HOST[:PORT]/repo[:tag|@digest]
    layout.py      an oci: layout as a source        registry.py  an OCI registry as a source (auth.py: logins,
    archive.py     a docker-archive                                challenges)
    manifests.py   manifest / index / config shapes  fetch.py     resolve + download, every blob verified
    tarstream.py   decompress (sniffed), bounded     apply.py     layer rules into a tree (rootdir.py: writes
    xattrs.py      extended attributes                            only through dir fds), limits.py
    debian.py      mmdebstrap tarballs (aptsources.py: the host's archive)
    inject.py      /.forkd (agent files, env, workdir, image.json)
    ext4.py        mkfs.ext4 -d, sized, deterministic (ext4times.py: inode times)
    cache.py       the cache directory, locks, atomic publication        progress.py  progress callbacks
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .build import BuiltRootfs, build_rootfs
    from .debian import DebianSpec
    from .limits import DEFAULT_LIMITS, ImageLimits
    from .reference import parse_image_reference

__all__ = ["DEFAULT_LIMITS", "BuiltRootfs", "DebianSpec", "ImageLimits", "build_rootfs", "parse_image_reference"]

#: where each public name lives; imported on first use (PEP 562), so that ``forkd_client.images.errors``,
#: which every command's exit-code table needs, does not load the whole builder (~50 ms) into ``forkd --help``
_HOMES = {
    "BuiltRootfs": "build",
    "build_rootfs": "build",
    "DebianSpec": "debian",
    "DEFAULT_LIMITS": "limits",
    "ImageLimits": "limits",
    "parse_image_reference": "reference",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
