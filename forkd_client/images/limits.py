"""The bounds every image build stays within (docs/images.md, "Limits").

Work is bounded by what was actually produced, never by what an image declares: the decompressed
byte count is counted as the decompressor produces it, a declared file size is checked before the
first byte is written, and every entry counts against :attr:`ImageLimits.max_entries` as it is read.

Change them in code with ``dataclasses.replace(DEFAULT_LIMITS, max_entries=2_000_000)`` passed as
``limits=`` to :func:`forkd_client.images.build.build_rootfs`, or for one run with the environment:
``FORKD_IMAGE_LIMITS="max_entries=2000000,max_unpacked_bytes=64GiB"`` (read by
:meth:`ImageLimits.from_env`, which the builder calls when no ``limits`` are given).

Errors: :class:`~forkd_client.images.errors.InvalidSetting` (a UsageError) for a malformed
``FORKD_IMAGE_LIMITS``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import InvalidSetting

LIMITS_ENV = "FORKD_IMAGE_LIMITS"
_GiB = 1 << 30
_MiB = 1 << 20
_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": _MiB, "mib": _MiB, "g": _GiB, "gib": _GiB, "t": 1 << 40}


@dataclass(frozen=True)
class ImageLimits:
    """Bounds of one build. Sizes are bytes; counts are whole-image totals unless named per entry."""

    max_manifest_bytes: int = 4 * _MiB
    """A manifest, index or docker-archive ``manifest.json``."""
    max_config_bytes: int = 16 * _MiB
    """An image config blob."""
    max_layers: int = 256
    """Layers in one image (Docker's own limit is 127)."""
    max_blob_bytes: int = 16 * _GiB
    """One layer blob as stored (compressed), declared or downloaded."""
    max_decompressed_bytes: int = 64 * _GiB
    """Bytes all layers decompress to, counted as produced (the decompression-bomb bound)."""
    max_unpacked_bytes: int = 32 * _GiB
    """Bytes of regular-file content written into the tree, all layers together."""
    max_entries: int = 1_000_000
    """Tar entries read, all layers together (whiteouts and skipped entries count)."""
    max_header_bytes: int = 1 * _MiB
    """One pax extended header or GNU long-name record (tar reads it whole into memory)."""
    max_path_bytes: int = 4096
    """An entry's full name, and a symlink's target (PATH_MAX)."""
    max_name_bytes: int = 255
    """One path component (ext4 cannot store more)."""
    max_xattr_bytes: int = 64 * 1024
    """The extended attributes of one entry, names and values together."""
    max_symlink_hops: int = 40
    """Symlinks followed while resolving one parent directory inside the root (the kernel's ELOOP bound)."""

    def replace(self, **changes: int) -> ImageLimits:
        """A copy with ``changes`` applied (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ImageLimits:
        """The defaults, changed by ``FORKD_IMAGE_LIMITS`` (``name=value,…``; sizes take KiB/MiB/GiB/TiB).

        Raises InvalidSetting (a UsageError) naming a malformed or unknown setting.
        """
        text = (os.environ if env is None else env).get(LIMITS_ENV, "").strip()
        if not text:
            return DEFAULT_LIMITS
        fields = {f.name for f in dataclasses.fields(cls)}
        changes: dict[str, int] = {}
        for item in text.split(","):
            name, sep, value = item.strip().partition("=")
            match = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", value)
            unit = match.group(2).lower() if match else ""
            if not sep or name not in fields or match is None or unit not in _UNITS:
                raise InvalidSetting(
                    f"{LIMITS_ENV}: bad setting {item.strip()!r}: want NAME=NUMBER[KiB|MiB|GiB|TiB] with NAME one of "
                    + ", ".join(sorted(fields))
                )
            changes[name] = int(match.group(1)) * _UNITS[unit]
        return DEFAULT_LIMITS.replace(**changes)


DEFAULT_LIMITS = ImageLimits()
