"""forkd ``.forkd-snapshot.tar.zst`` packs (v1 and v2): public types, errors and the writer.

A pack is one zstd stream holding a tar archive (GNU headers, regular files only, mode
0644, no directory entries). ``manifest.toml`` comes first and declares every other
entry with its size and lowercase-hex sha256:

- v1 (one snapshot): ``manifest.toml``, then ``snapshot.json``, ``vmstate``,
  ``rootfs.ext4`` (optional), ``memory.bin`` at the tar root, listed in ``files``.
- v2 (a chain, root -> head): the same four names under ``<tag>/`` for every link,
  listed per link in ``chain``; top-level ``files`` is empty and top-level ``parent_tag``
  mirrors the head's.

The safe reader lives in :mod:`manifest.forkd_unpack` (``read_pack``,
``read_pack_manifest``, ``rewrite_snapshot_json_paths``). Errors::

    ManifestError(ValueError)                (manifest.errors)
    └── PackError                            a forkd pack cannot be written or read safely
        ├── UnsafePackEntry                  entry could escape staging or is not a regular file
        ├── UndeclaredPackEntry              entry not declared by manifest.toml (or before it)
        ├── PackTooLarge                     a size or count is over a PackLimits bound
        ├── PackHashMismatch                 bytes do not hash to the declared sha256
        ├── UnsupportedPackVersion           forkd_pack_version other than 1 or 2
        ├── CorruptPack                      truncated / corrupt zstd or tar, missing entry
        └── PackManifestInvalid              manifest.toml (or our input to it) is not valid
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import tomli_w
import zstandard

from manifest.errors import ManifestError
from manifest.fileops import atomic_write


class PackError(ManifestError):
    """A forkd pack cannot be written or read safely."""


class UnsafePackEntry(PackError):
    """A tar entry could escape the staging directory or is not a regular file."""


class UndeclaredPackEntry(PackError):
    """A tar entry is not declared by manifest.toml, or comes before it."""


class PackTooLarge(PackError):
    """A manifest, entry, total size or chain length is over its limit."""


class PackHashMismatch(PackError):
    """File bytes do not hash to the sha256 the manifest declares for them."""


class UnsupportedPackVersion(PackError):
    """``forkd_pack_version`` is not one this code understands (1 or 2)."""


class CorruptPack(PackError):
    """The zstd stream or tar archive is truncated or corrupt, or a declared entry is missing."""


class PackManifestInvalid(PackError):
    """manifest.toml is not a valid forkd pack manifest (or write_pack got invalid links)."""


MANIFEST_NAME = "manifest.toml"
SNAPSHOT_FILES = ("snapshot.json", "vmstate", "rootfs.ext4", "memory.bin")  # forkd's pack order
REQUIRED_FILES = ("vmstate", "memory.bin")
PACK_VERSION_V1 = 1
PACK_VERSION_V2 = 2
_PACK_TAG = re.compile(r"[A-Za-z0-9_-]{1,64}")  # forkd is_safe_pack_tag / daemon is_safe_tag
_CLI_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")  # forkd CLI validate_tag (v1 tag)
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_BLOCK = 1 << 20  # read/write granularity: never hold a whole memory.bin in memory
_TAR_BLOCK = 512


def is_safe_pack_tag(tag: object) -> bool:
    """True if ``tag`` passes forkd's ``is_safe_pack_tag``: ``[A-Za-z0-9_-]{1,64}``."""
    return isinstance(tag, str) and _PACK_TAG.fullmatch(tag) is not None


def is_valid_cli_tag(tag: object) -> bool:
    """True if ``tag`` passes forkd's CLI ``validate_tag``: ``[A-Za-z0-9_][A-Za-z0-9._-]{0,63}``."""
    return isinstance(tag, str) and _CLI_TAG.fullmatch(tag) is not None


def is_sha256_hex(value: object) -> bool:
    """True if ``value`` is a lowercase hex sha256 (forkd compares digests as exact strings)."""
    return isinstance(value, str) and _SHA256_HEX.fullmatch(value) is not None


@dataclass(frozen=True)
class PackLink:
    """One snapshot directory to pack; a chain is given root -> head."""

    tag: str  # must pass is_safe_pack_tag
    directory: Path  # holds snapshot.json (optional), vmstate, memory.bin, rootfs.ext4 (optional)
    parent_tag: str | None = None
    parent_content_hash: str | None = None  # lowercase hex sha256 of the parent's memory.bin
    snapshot_json: bytes | None = None  # packed instead of <directory>/snapshot.json when given
    skip: tuple[str, ...] = ()  # files of <directory> left out (e.g. a rootfs sent as the sidecar)


@dataclass(frozen=True)
class PackFileInfo:
    """A file as declared in manifest.toml (``path`` relative to the link directory)."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class UnpackedLink:
    """One extracted chain link; ``files`` are the pack's declarations (pre-rewrite)."""

    tag: str
    directory: Path
    parent_tag: str | None
    parent_content_hash: str | None
    files: tuple[PackFileInfo, ...]


@dataclass(frozen=True)
class UnpackedPack:
    """What a pack declared, and where its links now are (``links`` root -> head)."""

    version: int
    tag: str  # v1: the snapshot's tag; v2: informational (forkd never validates it)
    description: str | None
    base_image: str | None
    created_at: str
    forkd_version: str
    links: tuple[UnpackedLink, ...]
    rootfs: dict | None  # manifest's rootfs table: informational ONLY, never used as a path


@dataclass(frozen=True)
class PackLimits:
    """Bounds enforced by the reader before a byte is written."""

    max_manifest_bytes: int = 1 << 20  # also bounds each snapshot.json (it is metadata too)
    max_entry_bytes: int = 64 << 30
    max_total_bytes: int = 256 << 30
    max_links: int = 32


@dataclass(frozen=True)
class _SourceFile:
    name: str  # role name, e.g. "memory.bin"
    path: Path
    size: int
    sha256: str
    mtime_ns: int
    data: bytes | None = None  # the content itself, when it is not read from ``path``


def write_pack(
    links: Sequence[PackLink],
    out: Path,
    *,
    description: str | None = None,
    base_image: str | None = None,
    forkd_version: str = "0.5.3-forkd-hub",
    created_at: str | None = None,
    level: int = 3,
    rootfs: dict | None = None,
) -> Path:
    """Write ``links`` (root -> head) as a forkd pack at ``out`` and return ``out``.

    A single link without a parent becomes a v1 pack; anything else (several links, or a
    lone link that names a parent) becomes v2, because only v2 can carry parent metadata.
    Every file is read twice: once to hash it (manifest.toml, which holds the hashes,
    must come first) and once to stream it into the tar. ``rootfs`` is manifest.toml's
    ``{target_path, sha256, size}`` table of the head's rootfs sidecar, if any. The pack is written to
    ``<out>.partial``, fsynced and renamed; on any error the partial file is removed.

    Raises:
        PackManifestInvalid: no links, a bad tag, duplicate tags, a link whose
            ``parent_tag`` is not the previous link's tag, or a malformed parent hash.
        PackTooLarge: more links than ``PackLimits().max_links`` (readers would refuse it).
        PackHashMismatch: a link's ``parent_content_hash`` is not the sha256 of the
            previous link's memory.bin.
        FileNotFoundError: a link directory lacks ``vmstate`` or ``memory.bin``.
        PackError: a source file is not a regular file, or changed while being packed.
        OSError: reading the sources or writing ``out`` failed.
    """
    links = tuple(links)
    _check_links(links)
    created_at = created_at or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    mtime = _mtime_of(created_at)
    sources = [_hash_link(link) for link in links]
    parent_hashes = _parent_hashes(links, sources)
    manifest_text = _manifest_toml(links, sources, parent_hashes, description, base_image, created_at, forkd_version)
    if rootfs is not None:
        manifest_text += "\n[rootfs]\n" + tomli_w.dumps(rootfs)
    manifest = manifest_text.encode()
    v2 = _is_v2(links)
    with atomic_write(out) as raw:
        # every core: a pack of a real environment (GiB-sized images) is CPU-bound in zstd
        compressor = zstandard.ZstdCompressor(level=level, threads=-1)
        with compressor.stream_writer(raw, closefd=False) as zst:
            _append(zst, MANIFEST_NAME, io.BytesIO(manifest), len(manifest), mtime)
            for link, files in zip(links, sources, strict=False):
                for src in files:
                    name = f"{link.tag}/{src.name}" if v2 else src.name
                    _append_source(zst, name, src, mtime)
            zst.write(b"\0" * (2 * _TAR_BLOCK))  # end-of-archive marker, as tar-rs writes it
    return out


def _is_v2(links: tuple[PackLink, ...]) -> bool:
    return len(links) > 1 or links[0].parent_tag is not None


def _check_links(links: tuple[PackLink, ...]) -> None:
    if not links:
        raise PackManifestInvalid("write_pack needs at least one link")
    if len(links) > PackLimits().max_links:
        raise PackTooLarge(f"{len(links)} links exceed the chain limit of {PackLimits().max_links}")
    seen: set[str] = set()
    for i, link in enumerate(links):
        if not is_safe_pack_tag(link.tag):
            raise PackManifestInvalid(f"link tag {link.tag!r} does not match [A-Za-z0-9_-]{{1,64}}")
        if link.tag in seen:
            raise PackManifestInvalid(f"link tag {link.tag!r} appears twice in the chain")
        seen.add(link.tag)
        if link.parent_tag is not None and not is_safe_pack_tag(link.parent_tag):
            raise PackManifestInvalid(f"link {link.tag!r}: parent_tag {link.parent_tag!r} is not a safe tag")
        if i > 0 and link.parent_tag != links[i - 1].tag:
            raise PackManifestInvalid(
                f"broken chain: link {link.tag!r} has parent_tag {link.parent_tag!r}, "
                f"but the previous link is {links[i - 1].tag!r}"
            )
        if link.parent_content_hash is not None:
            if link.parent_tag is None:
                raise PackManifestInvalid(f"link {link.tag!r} has parent_content_hash but no parent_tag")
            if not is_sha256_hex(link.parent_content_hash):
                raise PackManifestInvalid(
                    f"link {link.tag!r}: parent_content_hash {link.parent_content_hash!r} is not lowercase hex sha256"
                )


def _hash_link(link: PackLink) -> list[_SourceFile]:
    """First pass: stat and hash every file present, in forkd's pack order."""
    files = []
    for name in SNAPSHOT_FILES:
        path = link.directory / name
        if name in link.skip:
            continue
        if name == "snapshot.json" and link.snapshot_json is not None:
            data = link.snapshot_json
            files.append(_SourceFile(name, path, len(data), hashlib.sha256(data).hexdigest(), 0, data))
            continue
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if name in REQUIRED_FILES:
                raise FileNotFoundError(f"snapshot directory {link.directory} has no {name}; nothing to pack") from None
            continue
        if not stat.S_ISREG(st.st_mode):
            raise PackError(f"{path} is not a regular file")
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            hashed = _copy_exact(f, st.st_size, digest.update, path)
        files.append(_SourceFile(name, path, hashed, digest.hexdigest(), st.st_mtime_ns))
    return files


def _parent_hashes(links: tuple[PackLink, ...], sources: list[list[_SourceFile]]) -> list[str | None]:
    """Each link's parent_content_hash: given, or filled from the previous link's memory.bin."""
    hashes: list[str | None] = []
    for i, link in enumerate(links):
        if i == 0:
            hashes.append(link.parent_content_hash)  # a partial chain's root: nothing to check against
            continue
        actual = next(s.sha256 for s in sources[i - 1] if s.name == "memory.bin")
        if link.parent_content_hash is not None and link.parent_content_hash != actual:
            raise PackHashMismatch(
                f"link {link.tag!r}: parent_content_hash {link.parent_content_hash} does not match "
                f"{links[i - 1].tag}/memory.bin (sha256 {actual})"
            )
        hashes.append(actual)
    return hashes


def _manifest_toml(
    links: tuple[PackLink, ...],
    sources: list[list[_SourceFile]],
    parent_hashes: list[str | None],
    description: str | None,
    base_image: str | None,
    created_at: str,
    forkd_version: str,
) -> str:
    """Serialise in forkd's field order and toml 0.8's layout (scalars, then [[files]] / [[chain]])."""
    v2 = _is_v2(links)
    head = links[-1]
    scalars = {
        "forkd_pack_version": PACK_VERSION_V2 if v2 else PACK_VERSION_V1,
        "tag": head.tag,
        "description": description,
        "base_image": base_image,
        "created_at": created_at,
        "forkd_version": forkd_version,
        "parent_tag": head.parent_tag if v2 else None,
    }
    parts = [tomli_w.dumps({k: v}) for k, v in scalars.items() if v is not None]
    if v2:
        parts.append(tomli_w.dumps({"files": []}))
        for link, files, parent_hash in zip(links, sources, parent_hashes, strict=False):
            meta = {"tag": link.tag, "parent_tag": link.parent_tag, "parent_content_hash": parent_hash}
            parts.append("\n[[chain]]\n" + tomli_w.dumps({k: v for k, v in meta.items() if v is not None}))
            parts.extend("\n[[chain.files]]\n" + _file_toml(src) for src in files)
    else:
        parts.extend("\n[[files]]\n" + _file_toml(src) for src in sources[0])
    return "".join(parts)


def _file_toml(src: _SourceFile) -> str:
    return tomli_w.dumps({"path": src.name, "size": src.size, "sha256": src.sha256})


def _mtime_of(created_at: str) -> int:
    """Entry mtimes come from created_at, so a pack's bytes depend only on its inputs."""
    try:
        return max(0, int(datetime.fromisoformat(created_at).timestamp()))
    except ValueError:
        return int(datetime.now(UTC).timestamp())


def _append(zst: BinaryIO, name: str, data: BinaryIO, size: int, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, 0o644, mtime, tarfile.REGTYPE
    zst.write(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "strict"))
    _copy_exact(data, size, zst.write, name)
    zst.write(b"\0" * (-size % _TAR_BLOCK))


def _append_source(zst: BinaryIO, name: str, src: _SourceFile, mtime: int) -> None:
    """Second pass: stream the file into the tar and check it is what we hashed."""
    if src.data is not None:
        _append(zst, name, io.BytesIO(src.data), src.size, mtime)
        return
    with open(src.path, "rb") as f:
        _append(zst, name, f, src.size, mtime)
        after = os.fstat(f.fileno())
    if (after.st_size, after.st_mtime_ns) != (src.size, src.mtime_ns):
        raise PackError(f"{src.path} changed while it was being packed")


def _copy_exact(src: BinaryIO, size: int, sink: Callable[[memoryview], object], what: object) -> int:
    """Feed exactly ``size`` bytes of ``src`` to ``sink`` in 1 MiB blocks; return ``size``."""
    buf = bytearray(min(_BLOCK, max(size, 1)))
    view = memoryview(buf)
    remaining = size
    while remaining:
        n = src.readinto(view[: min(len(buf), remaining)])  # type: ignore[attr-defined]  # every BinaryIO we get is buffered
        if not n:
            raise PackError(f"{what} is shorter than its recorded size {size} (changed while packing?)")
        sink(view[:n])
        remaining -= n
    return size
