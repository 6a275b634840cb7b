"""Safe reader for forkd ``.forkd-snapshot.tar.zst`` packs (v1 and v2).

Safe by construction, in one streaming pass: the first tar entry must be
``manifest.toml``; it is parsed and validated before anything is written. After that
only declared regular files are extracted, each checked for name, type, size and limits
before its first byte is written and hashed while it streams. Content never chooses a
host path: links land in ``<staging>/<tag>/`` under role names, and ``rootfs.target_path``
is returned as data only. On any error everything this call created under ``staging`` is
removed. The tar and zstd layers are parsed here (not by ``tarfile``) so that no header
field or decompression step can allocate unbounded memory or be misread.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from manifest.fileops import fsync_dir, write_atomically
from manifest.forkd_pack import (
    MANIFEST_NAME,
    PACK_VERSION_V1,
    PACK_VERSION_V2,
    REQUIRED_FILES,
    SNAPSHOT_FILES,
    CorruptPack,
    PackFileInfo,
    PackHashMismatch,
    PackLimits,
    PackManifestInvalid,
    PackTooLarge,
    UndeclaredPackEntry,
    UnpackedLink,
    UnpackedPack,
    UnsafePackEntry,
    UnsupportedPackVersion,
    is_safe_pack_tag,
    is_sha256_hex,
    is_valid_cli_tag,
)
from manifest.tarstream import BLOCK, ZEROS, TarEntry, TarReader, ZstdStream

_HOLE = 64 << 10  # zero runs this long stay holes (guest RAM is mostly zero pages)
_ZERO_HOLE = ZEROS[:_HOLE]
_TYPE_NAMES = {
    b"1": "hard link", b"2": "symbolic link", b"3": "character device", b"4": "block device",
    b"5": "directory", b"6": "fifo", b"7": "contiguous file", b"L": "GNU long-name record",
    b"K": "GNU long-link record", b"S": "GNU sparse file", b"V": "GNU volume header",
}  # fmt: skip
_PACK_TAG_RULE = "[A-Za-z0-9_-]{1,64}"
_CLI_TAG_RULE = "[A-Za-z0-9_][A-Za-z0-9._-]{0,63}"


def read_pack(pack: Path | BinaryIO, staging: Path, *, limits: PackLimits = PackLimits()) -> UnpackedPack:
    """Extract a forkd pack into ``staging/<tag>/`` (one directory per link) and describe it.

    ``staging`` must exist (create it on the filesystem of the final destination, so the
    caller can ``rename`` links into place). Each link's snapshot.json has its
    ``vmstate``/``memory`` paths rewritten to the extracted files, or is synthesised when
    the pack has none. ``UnpackedLink.files`` report the pack's declarations.

    Raises:
        FileNotFoundError: ``staging`` does not exist.
        FileExistsError: ``staging/<tag>`` already exists for some link.
        UnsafePackEntry: an entry is not a regular file, is absolute, has ``..`` or a
            backslash, or is duplicated.
        UndeclaredPackEntry: an entry is not declared, or comes before manifest.toml.
        PackTooLarge: manifest.toml, an entry, the total or the chain is over ``limits``.
        PackHashMismatch: an entry does not hash to its declared sha256.
        UnsupportedPackVersion: ``forkd_pack_version`` is not 1 or 2.
        PackManifestInvalid: manifest.toml is missing, unparsable or inconsistent (bad
            tag, broken chain, undeclared required file, ...).
        CorruptPack: truncated or corrupt zstd/tar, or a declared entry never arrives.
        OSError: reading the pack or writing under ``staging`` failed.
    """
    if not staging.is_dir():
        raise FileNotFoundError(f"staging directory {staging} does not exist")
    created: list[Path] = []
    try:
        with _open_pack(pack) as source:
            tar = TarReader(ZstdStream(source))
            manifest = _read_manifest(tar, limits)
            for link in manifest.links:
                (staging / link.tag).mkdir()
                created.append(staging / link.tag)
            _extract_declared(tar, manifest, staging, limits)
            tar.finish()
        links = tuple(replace(link, directory=staging / link.tag) for link in manifest.links)
        for link in links:
            _finish_snapshot_json(link, limits)
            fsync_dir(link.directory)
        return replace(manifest, links=links)
    except BaseException:
        for directory in reversed(created):
            shutil.rmtree(directory, ignore_errors=True)
        raise


def read_pack_manifest(pack: Path | BinaryIO, *, limits: PackLimits = PackLimits()) -> UnpackedPack:
    """Read and validate only manifest.toml; extract nothing.

    Link ``directory`` values are relative (``Path(tag)``): where :func:`read_pack` would
    put each link under its staging directory.

    Raises:
        UnsafePackEntry, UndeclaredPackEntry, PackTooLarge, UnsupportedPackVersion,
        PackManifestInvalid, CorruptPack: as for :func:`read_pack`, for the manifest.
        OSError: reading the pack failed.
    """
    with _open_pack(pack) as source:
        return _read_manifest(TarReader(ZstdStream(source)), limits)


def rewrite_snapshot_json_paths(directory: Path, *, max_bytes: int = 1 << 20) -> None:
    """Point ``directory/snapshot.json``'s ``vmstate``/``memory`` at ``directory``'s files.

    Sets them to the absolute ``<directory>/vmstate`` and ``<directory>/memory.bin`` (role
    names, never a path taken from content), keeps every other field (as forkd's unpack
    does), and replaces the file atomically. Call it again after renaming a link.

    Raises:
        FileNotFoundError: there is no snapshot.json.
        PackTooLarge: snapshot.json is larger than ``max_bytes``.
        CorruptPack: snapshot.json is not a JSON object.
        OSError: reading or writing failed.
    """
    path = directory / "snapshot.json"
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise PackTooLarge(f"{path} is larger than {max_bytes} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise CorruptPack(f"{path} is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise CorruptPack(f"{path} is not a JSON object")
    doc.update(_role_paths(directory))
    _write_json_atomically(path, doc)


def _role_paths(directory: Path) -> dict[str, str]:
    base = Path(os.path.abspath(directory))
    return {"vmstate": str(base / "vmstate"), "memory": str(base / "memory.bin")}


def _finish_snapshot_json(link: UnpackedLink, limits: PackLimits) -> None:
    """Rewrite the packer's absolute paths, or synthesise forkd's minimal snapshot.json."""
    if any(f.path == "snapshot.json" for f in link.files):
        rewrite_snapshot_json_paths(link.directory, max_bytes=limits.max_manifest_bytes)
        return
    doc: dict[str, object] = {**_role_paths(link.directory), "volumes": []}
    if link.parent_tag is not None:
        doc["parent_tag"] = link.parent_tag
    if link.parent_content_hash is not None:
        doc["parent_content_hash"] = link.parent_content_hash
    _write_json_atomically(link.directory / "snapshot.json", doc)


def _write_json_atomically(path: Path, doc: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(doc, indent=2, ensure_ascii=False))  # serde_json's pretty layout


@contextmanager
def _open_pack(pack: Path | BinaryIO) -> Iterator[BinaryIO]:
    """A path is opened (and closed) here; a stream stays the caller's to close."""
    if isinstance(pack, (str, os.PathLike)):
        with open(pack, "rb") as f:
            yield f
    else:
        yield pack


# ---------------------------------------------------------------- manifest.toml


def _read_manifest(tar: TarReader, limits: PackLimits) -> UnpackedPack:
    entry = tar.next_entry()
    if entry is None:
        raise PackManifestInvalid("pack holds no entries; forkd packs start with manifest.toml")
    _check_entry_shape(entry)
    if entry.name != MANIFEST_NAME:
        raise UndeclaredPackEntry(
            f"entry {entry.name!r} comes before manifest.toml; forkd writes manifest.toml first "
            "and nothing is extracted before it is known to be declared"
        )
    if entry.size > limits.max_manifest_bytes:
        raise PackTooLarge(f"manifest.toml is {entry.size} bytes, over the limit of {limits.max_manifest_bytes}")
    raw = tar.read_body(entry.size)
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
        raise PackManifestInvalid(f"manifest.toml is not valid UTF-8 TOML: {e!r}") from None
    return _parse_manifest(doc, limits)


def _parse_manifest(doc: dict, limits: PackLimits) -> UnpackedPack:
    version = doc.get("forkd_pack_version")
    _require(type(version) is int, f"forkd_pack_version must be an integer, got {version!r}")
    if version not in (PACK_VERSION_V1, PACK_VERSION_V2):
        raise UnsupportedPackVersion(f"forkd_pack_version = {version} is not supported (this reader knows 1 and 2)")
    tag = _get(doc, "tag", str)
    if version == PACK_VERSION_V1:
        _require("chain" not in doc, "a v1 pack cannot have a chain")
        _require(is_valid_cli_tag(tag), f"tag {tag!r} does not match {_CLI_TAG_RULE}")
        parent = _get(doc, "parent_tag", str, optional=True)
        _require(parent is None or is_safe_pack_tag(parent), f"parent_tag {parent!r} does not match {_PACK_TAG_RULE}")
        links: tuple[UnpackedLink, ...] = (
            UnpackedLink(tag, Path(tag), parent, None, _parse_files(doc.get("files"), "files", limits)),
        )
    else:  # the head's tag, or an owner-qualified name in forkd's docs: informational, never a path
        _require(tag != "", "tag must not be empty")
        _require(doc.get("files", []) == [], "a v2 pack declares files per chain link; top-level files must be empty")
        links = _parse_chain(doc.get("chain"), limits)
    total = sum(f.size for link in links for f in link.files)
    if total > limits.max_total_bytes:
        raise PackTooLarge(f"manifest.toml declares {total} bytes in all, over the limit of {limits.max_total_bytes}")
    rootfs = _get(doc, "rootfs", dict, optional=True)
    return UnpackedPack(
        version=version,
        tag=tag,
        description=_get(doc, "description", str, optional=True),
        base_image=_get(doc, "base_image", str, optional=True),
        created_at=_get(doc, "created_at", str),
        forkd_version=_get(doc, "forkd_version", str),
        links=links,
        rootfs=dict(rootfs) if rootfs is not None else None,
    )


def _parse_chain(chain: object, limits: PackLimits) -> tuple[UnpackedLink, ...]:
    if not isinstance(chain, list) or not chain:
        raise PackManifestInvalid("manifest.toml: a v2 pack needs a non-empty chain")
    if len(chain) > limits.max_links:
        raise PackTooLarge(f"manifest.toml: chain has {len(chain)} links, over the limit of {limits.max_links}")
    links: list[UnpackedLink] = []
    for i, meta in enumerate(chain):
        where = f"chain[{i}]"
        _require(isinstance(meta, dict), f"{where} must be a table")
        tag = _get(meta, "tag", str, where)
        _require(is_safe_pack_tag(tag), f"{where} tag {tag!r} does not match {_PACK_TAG_RULE}")
        _require(all(link.tag != tag for link in links), f"{where} tag {tag!r} appears twice in the chain")
        parent = _get(meta, "parent_tag", str, where, optional=True)
        _require(
            parent is None or is_safe_pack_tag(parent), f"{where} parent_tag {parent!r} does not match {_PACK_TAG_RULE}"
        )
        parent_hash = _get(meta, "parent_content_hash", str, where, optional=True)
        _require(parent_hash is None or is_sha256_hex(parent_hash),
                 f"{where} parent_content_hash {parent_hash!r} is not lowercase hex sha256")  # fmt: skip
        files = _parse_files(meta.get("files"), f"{where}.files", limits)
        if links:  # the root may name a parent outside the pack (a partial chain)
            prev = links[-1]
            _require(parent == prev.tag,
                     f"broken chain: {where} {tag!r} has parent_tag {parent!r} but the previous link is {prev.tag!r}")  # fmt: skip
            prev_memory = next(f.sha256 for f in prev.files if f.path == "memory.bin")
            _require(parent_hash in (None, prev_memory),
                     f"broken chain: {where} {tag!r} has parent_content_hash {parent_hash} "
                     f"but {prev.tag}/memory.bin is declared with sha256 {prev_memory}")  # fmt: skip
        links.append(UnpackedLink(tag, Path(tag), parent, parent_hash, files))
    return tuple(links)


def _parse_files(files: object, where: str, limits: PackLimits) -> tuple[PackFileInfo, ...]:
    if not isinstance(files, list):
        raise PackManifestInvalid(f"manifest.toml: {where} must be an array of {{path, size, sha256}} tables")
    out: list[PackFileInfo] = []
    for i, item in enumerate(files):
        at = f"{where}[{i}]"
        _require(isinstance(item, dict), f"{at} must be a table")
        path, size, sha = _get(item, "path", str, at), _get(item, "size", int, at), _get(item, "sha256", str, at)
        _require(path in SNAPSHOT_FILES, f"{at} path {path!r} is not one of {', '.join(SNAPSHOT_FILES)}")
        _require(all(f.path != path for f in out), f"{where} declares {path!r} twice")
        _require(size >= 0, f"{at} ({path}) has negative size {size}")
        limit = limits.max_manifest_bytes if path == "snapshot.json" else limits.max_entry_bytes
        if size > limit:
            raise PackTooLarge(
                f"manifest.toml: {at} ({path}) declares {size} bytes, over the per-entry limit of {limit}"
            )
        _require(is_sha256_hex(sha), f"{at} ({path}) sha256 {sha!r} is not lowercase hex sha256")
        out.append(PackFileInfo(path, size, sha))
    for required in REQUIRED_FILES:
        _require(any(f.path == required for f in out), f"{where} does not declare required file {required}")
    return tuple(out)


def _require(ok: bool, problem: str) -> None:
    if not ok:
        raise PackManifestInvalid(f"manifest.toml: {problem}")


def _get(table: dict[str, Any], key: str, kind: type, where: str = "", *, optional: bool = False) -> Any:
    """``table[key]`` if it has type ``kind`` (bool is not an int here); None if optional and absent."""
    value = table.get(key)
    if value is None and optional:
        return None
    _require(isinstance(value, kind) and type(value) is not bool,
             f"{where + '.' if where else ''}{key} must be a {kind.__name__}, got {value!r}")  # fmt: skip
    return value


# ---------------------------------------------------------------- extraction


def _extract_declared(tar: TarReader, manifest: UnpackedPack, staging: Path, limits: PackLimits) -> None:
    prefix = manifest.version == PACK_VERSION_V2
    declared = {
        (f"{link.tag}/{f.path}" if prefix else f.path): (link.tag, f) for link in manifest.links for f in link.files
    }
    seen = {MANIFEST_NAME}
    total = 0
    while (entry := tar.next_entry()) is not None:
        _check_entry_shape(entry)
        if entry.name in seen:
            raise UnsafePackEntry(f"entry {entry.name!r} appears twice in the pack")
        if entry.name not in declared:
            raise UndeclaredPackEntry(f"entry {entry.name!r} is not declared in manifest.toml")
        seen.add(entry.name)
        tag, info = declared[entry.name]
        if entry.size > info.size:
            raise PackTooLarge(f"entry {entry.name!r} is {entry.size} bytes but manifest.toml declares {info.size}")
        if entry.size < info.size:
            raise CorruptPack(f"entry {entry.name!r} is {entry.size} bytes but manifest.toml declares {info.size}")
        total += entry.size
        if total > limits.max_total_bytes:
            raise PackTooLarge(f"entry {entry.name!r} brings the pack over the total limit of {limits.max_total_bytes}")
        _extract_file(tar, entry.name, info, staging / tag / info.path)
    missing = [name for name in declared if name not in seen]
    if missing:
        raise CorruptPack(
            f"pack ends without declared entr{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)} (truncated?)"
        )


def _check_entry_shape(entry: TarEntry) -> None:
    """Reject names that could leave staging and anything that is not a plain file."""
    name = entry.name
    if not name or "\0" in name:
        raise UnsafePackEntry(f"entry name {name!r} is empty or contains NUL")
    if "\\" in name:
        raise UnsafePackEntry(f"entry {name!r} contains a backslash")
    if name.startswith("/"):
        raise UnsafePackEntry(f"entry {name!r} is an absolute path")
    if ".." in name.split("/"):
        raise UnsafePackEntry(f"entry {name!r} has a '..' component (path traversal)")
    if entry.kind not in (b"0", b"\0"):
        what = _TYPE_NAMES.get(entry.kind, f"tar entry of type {entry.kind!r}")
        target = f" -> {entry.linkname!r}" if entry.kind in (b"1", b"2") else ""
        raise UnsafePackEntry(f"entry {name!r} is a {what}{target}; packs may hold only regular files")


def _extract_file(tar: TarReader, name: str, info: PackFileInfo, dest: Path) -> None:
    """Stream one body to ``dest``, hashing as it goes; zero runs become holes."""
    digest = hashlib.sha256()
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with open(fd, "wb") as out:
        remaining = info.size
        while remaining:
            chunk = tar.read_body(min(BLOCK, remaining))
            digest.update(chunk)
            _write_sparse(out, chunk)
            remaining -= len(chunk)
        out.truncate(info.size)
        out.flush()
        os.fsync(out.fileno())
    actual = digest.hexdigest()
    if actual != info.sha256:
        raise PackHashMismatch(
            f"entry {name!r}: sha256 mismatch: manifest.toml declares {info.sha256}, content is {actual}"
        )


def _write_sparse(out: BinaryIO, chunk: bytes) -> None:
    """Write ``chunk``, seeking over each all-zero 64 KiB piece instead of writing it."""
    view = memoryview(chunk)
    pending = 0  # start of the data run not yet written
    for start in range(0, len(chunk), _HOLE):
        piece = min(_HOLE, len(chunk) - start)
        if chunk.startswith(_ZERO_HOLE[:piece], start):  # memcmp, no copy
            out.write(view[pending:start])
            out.seek(piece, os.SEEK_CUR)
            pending = start + piece
    out.write(view[pending:])
