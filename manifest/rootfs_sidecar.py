"""forkd's rootfs sidecar: ``<sha256[:16]>.rootfs.zst`` beside a pack (forkd v0.5.3, #242).

forkd keeps a snapshot's disk image outside the snapshot directory (``snapshot.json``
``rootfs``, e.g. ``/var/cache/forkd/python-3-12-slim.ext4``) because Firecracker reopens that
exact path at restore. Its ``pack`` writes the image zstd-compressed (forkd: level 19; here 9, see SIDECAR_LEVEL) next to the pack,
named by the first 16 hex characters of the image's sha256, and records
``rootfs = {target_path, sha256, size}`` in manifest.toml (sha256 and size of the *uncompressed*
image); ``unpack``/``pull`` decompress it to ``target_path`` (/work/shared/reference/forkd-formats.md
§3.4, §4.2). Where the image lands on our side is decided by the caller
(:mod:`forkd_client.rootfs`): never simply where the pack says.

Errors: ``manifest.forkd_pack.PackHashMismatch`` (the image does not hash to the declared
sha256), ``PackTooLarge`` (it decompresses to more than the declared size), ``CorruptPack``
(not zstd, or shorter than declared), ``PackManifestInvalid`` (a malformed ``rootfs`` table);
OSError.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import zstandard

from .fileops import atomic_write
from .forkd_pack import CorruptPack, PackHashMismatch, PackManifestInvalid, PackTooLarge, is_sha256_hex

SIDECAR_SUFFIX = ".rootfs.zst"
# forkd writes level 19; any level decodes the same. Measured on a real 1 GiB Debian python rootfs (300 MiB of
# data; zstd -T2): level 19 took 210 s for 70 MB, level 9 8.6 s for 80 MB. A pack of a real environment must not
# take minutes for 14% fewer bytes, so: level 9, on every core.
SIDECAR_LEVEL = 9
_BLOCK = 1 << 20


@dataclass(frozen=True)
class RootfsInfo:
    """manifest.toml's ``rootfs`` table."""

    target_path: str
    sha256: str  # lowercase hex of the uncompressed image
    size: int

    def to_table(self) -> dict[str, object]:
        return {"target_path": self.target_path, "sha256": self.sha256, "size": self.size}

    @classmethod
    def from_table(cls, table: object) -> RootfsInfo:
        """Parse manifest.toml's ``rootfs``; raises PackManifestInvalid naming what is wrong."""
        if not isinstance(table, dict):
            raise PackManifestInvalid("manifest.toml: rootfs must be a table")
        target, sha, size = table.get("target_path"), table.get("sha256"), table.get("size")
        if not isinstance(target, str) or not target or "\0" in target:
            raise PackManifestInvalid(f"manifest.toml: rootfs.target_path must be a path, got {target!r}")
        if not is_sha256_hex(sha):
            raise PackManifestInvalid(f"manifest.toml: rootfs.sha256 {sha!r} is not lowercase hex sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise PackManifestInvalid(f"manifest.toml: rootfs.size must be a non-negative integer, got {size!r}")
        return cls(target, sha, size)  # type: ignore[arg-type]


def sidecar_name(sha256_hex: str) -> str:
    """``<first 16 hex of sha256>.rootfs.zst``, as forkd names it."""
    return f"{sha256_hex[:16]}{SIDECAR_SUFFIX}"


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def write_sidecar(
    image: Path, out_dir: Path, target_path: str | Callable[[str], str], *, level: int = SIDECAR_LEVEL
) -> tuple[RootfsInfo, Path]:
    """Write ``image`` as forkd's sidecar in ``out_dir`` (kept as is when a sidecar of the same
    name is already there, as forkd does); returns the manifest table and the sidecar's path.
    ``target_path`` may be a function of the image's sha256 (hex)."""
    sha = file_sha256(image)
    target = target_path(sha) if callable(target_path) else target_path
    info = RootfsInfo(target, sha, os.path.getsize(image))
    out = out_dir / sidecar_name(info.sha256)
    if out.is_file():
        return info, out
    with open(image, "rb") as src, atomic_write(out) as dst:
        compressor = zstandard.ZstdCompressor(level=level, write_content_size=True, threads=-1)
        compressor.copy_stream(src, dst, size=info.size, read_size=_BLOCK, write_size=_BLOCK)
    return info, out


def install_sidecar(sidecar: Path, dest: Path, info: RootfsInfo) -> None:
    """Decompress ``sidecar`` to ``dest`` (through a fresh partial file in the same directory,
    created exclusively, so never through a symlink), checking the declared size and sha256 while
    it streams; zero runs become holes. On any error nothing is left but what was at ``dest``."""
    digest = hashlib.sha256()
    written = 0
    with open(sidecar, "rb") as src, atomic_write(dest, perms=0o644) as out:
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(src)
            while piece := reader.read(_BLOCK):
                written += len(piece)
                if written > info.size:
                    raise PackTooLarge(f"{sidecar} decompresses to more than the declared {info.size} bytes")
                digest.update(piece)
                if piece.count(0) == len(piece):
                    out.seek(len(piece), os.SEEK_CUR)
                else:
                    out.write(piece)
        except zstandard.ZstdError as e:
            raise CorruptPack(f"{sidecar} is not a valid zstd stream: {e}") from None
        if written != info.size:
            raise CorruptPack(f"{sidecar} holds {written} bytes, manifest.toml declares {info.size}")
        out.truncate(info.size)
        actual = digest.hexdigest()
        if actual != info.sha256:
            raise PackHashMismatch(
                f"{sidecar}: sha256 mismatch: manifest.toml declares {info.sha256}, image is {actual}"
            )


__all__ = ["SIDECAR_SUFFIX", "RootfsInfo", "file_sha256", "install_sidecar", "sidecar_name", "write_sidecar"]
