"""One snapshot directory on disk: tag rules, forkd's snapshot.json, our forkd-hub.json.

A snapshot directory is forkd-compatible first (see /work/shared/reference/forkd-formats.md §1)::

    <dir>/
      snapshot.json    forkd's metadata, exactly as forkd writes it (serde pretty JSON):
                       vmstate, memory (absolute paths into <dir>), volumes, and for chain
                       links parent_tag + parent_content_hash (lowercase hex sha256 of the
                       parent's memory.bin); rootfs (absolute path) only for an image
                       outside the directory, never for its own rootfs.ext4.
                       Unknown fields are preserved whenever we rewrite it.
      vmstate          VMM device/CPU state
      memory.bin       full guest RAM image (links are fully materialised, like forkd's)
      rootfs.ext4      optional disk image
      forkd-hub.json   ours, ignored by forkd (schema below)

``forkd-hub.json`` (schema_version 1)::

    {"schema_version": 1, "tag": "py-numpy", "parent_tag": "py-base",
     "created": "2026-06-14T10:00:00Z", "chunk_size": 65536,
     "compat": {...}, "annotations": {...},
     "files": {"memory.bin": {"size": 536870912, "digest": "blake3:<hex>", "sha256": "sha256:<hex>"}, ...},
     "origin": {"hub": "...", "reference": "...", "manifest_digest": "blake3:<hex>"},   (optional)
     "parent_digest": "blake3:<hex>",   (optional: blake3 of the parent's memory.bin this link
                                         was made from; chain checks use it instead of sha256)
     "parent_chunk_tree": {"chunk_size": 65536, "digest": "blake3:<hex>"}}   (optional: the
                                         chunk-tree digest of that parent's memory.bin, format v2)

A file may also record ``"chunk_tree": {"chunk_size": 65536, "digest": "blake3:<hex>"}``, its
chunk-tree digest (:mod:`manifest.chunktree`): a format v2 pull records that instead of a blake3
of the bytes (``digest`` null), because it is proven by construction (every new chunk verified on
arrival, every other one the verified parent's) and needs no read of the file.

``snapshot.json`` is the source of truth for the parent (forkd's daemon reads it);
``forkd-hub.json`` repeats it for convenience. A file digest may be null (e.g. blake3 of an
unpacked file, computed lazily later).

Errors: :class:`~forkd_client.errors.InvalidTag`, :class:`~forkd_client.errors.InvalidSnapshotDir`
(unreadable or malformed metadata, naming the file); OSError.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from manifest.fileops import write_atomically
from manifest.jsontext import loads as loads_json
from manifest.mediatypes import MEMORY_FILE, ROOTFS_FILE, VMSTATE_FILE

from .errors import InvalidSnapshotDir, InvalidTag

SNAPSHOT_JSON = "snapshot.json"
HUB_JSON = "forkd-hub.json"
HUB_SCHEMA_VERSION = 1
FILE_ROLES = (VMSTATE_FILE, MEMORY_FILE, ROOTFS_FILE)
MAX_JSON_BYTES = 1 << 20

# New tags must pass all three of forkd's validators (CLI validate_tag, daemon is_safe_tag,
# pack is_safe_pack_tag), so every forkd tool accepts what we create.
_NEW_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")
# Existing tags are read with forkd's CLI rule (it allows dots), so we can list and remove
# whatever the forkd CLI created. Neither rule admits '/', '..' on its own, or a leading '.'.
_EXISTING_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


def validate_tag(tag: object) -> str:
    """Return ``tag`` if it may name a new snapshot, else raise InvalidTag."""
    if not isinstance(tag, str) or not _NEW_TAG.fullmatch(tag):
        raise InvalidTag(f"invalid tag {tag!r}: use 1-64 characters from A-Z a-z 0-9 _ -, not starting with '-'")
    return tag


def validate_existing_tag(tag: object) -> str:
    """Return ``tag`` if it may name an existing snapshot (forkd CLI rule, dots allowed), else InvalidTag."""
    if not isinstance(tag, str) or not _EXISTING_TAG.fullmatch(tag):
        raise InvalidTag(f"invalid tag {tag!r}")
    return tag


def is_existing_tag(name: str) -> bool:
    return _EXISTING_TAG.fullmatch(name) is not None


def rfc3339(timestamp: float | None = None) -> str:
    """UTC RFC 3339 with second resolution, e.g. ``2026-06-14T10:00:00Z`` (forkd's format)."""
    moment = datetime.now(UTC) if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class FileRecord:
    """One file of a snapshot: its size and content digests (``algorithm:hex``), when known."""

    size: int
    digest: str | None = None
    sha256: str | None = None
    chunk_tree: tuple[int, str] | None = None  # (chunk size, "blake3:<hex>"): its chunk-tree digest

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"size": self.size, "digest": self.digest, "sha256": self.sha256}
        if self.chunk_tree is not None:
            obj["chunk_tree"] = tree_obj(self.chunk_tree)
        return obj


def tree_obj(tree: tuple[int, str]) -> dict[str, Any]:
    """A chunk-tree digest as forkd-hub.json writes it."""
    return {"chunk_size": tree[0], "digest": tree[1]}


def parse_tree(obj: Any, what: str, where: str) -> tuple[int, str] | None:
    """A chunk-tree digest as forkd-hub.json writes it (or null). Raises InvalidSnapshotDir."""
    if obj is None:
        return None
    size, digest = (obj.get("chunk_size"), obj.get("digest")) if isinstance(obj, dict) else (None, None)
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise InvalidSnapshotDir(f"{where}: {what} needs a positive integer chunk_size")
    if not (isinstance(digest, str) and digest.startswith("blake3:")):
        raise InvalidSnapshotDir(f"{where}: {what} needs a blake3 digest")
    return size, digest


@dataclass(frozen=True)
class HubMeta:
    """The content of ``forkd-hub.json``."""

    tag: str
    parent_tag: str | None
    created: str
    chunk_size: int
    compat: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    files: dict[str, FileRecord] = field(default_factory=dict)
    origin: dict[str, str] | None = None
    parent_digest: str | None = None  # blake3 of the parent's memory.bin this link was made from
    parent_tree: tuple[int, str] | None = None  # chunk-tree digest of that memory.bin (format v2 pulls)

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "schema_version": HUB_SCHEMA_VERSION,
            "tag": self.tag,
            "parent_tag": self.parent_tag,
            "created": self.created,
            "chunk_size": self.chunk_size,
            "compat": dict(self.compat),
            "annotations": dict(sorted(self.annotations.items())),
            "files": {role: self.files[role].to_obj() for role in FILE_ROLES if role in self.files},
        }
        if self.origin:
            obj["origin"] = dict(self.origin)
        if self.parent_digest:
            obj["parent_digest"] = self.parent_digest
        if self.parent_tree is not None:
            obj["parent_chunk_tree"] = tree_obj(self.parent_tree)
        return obj

    @classmethod
    def from_obj(cls, obj: Any, where: str) -> HubMeta:
        """Parse a decoded forkd-hub.json; raises InvalidSnapshotDir naming ``where``."""

        def bad(what: str) -> InvalidSnapshotDir:
            return InvalidSnapshotDir(f"{where}: {what}")

        if not isinstance(obj, dict):
            raise bad("must be a JSON object")
        tag, parent, created = obj.get("tag"), obj.get("parent_tag"), obj.get("created")
        if not isinstance(tag, str) or not isinstance(created, str) or not isinstance(parent, (str, type(None))):
            raise bad("tag, parent_tag and created must be strings")
        chunk_size = obj.get("chunk_size")
        if not isinstance(chunk_size, int) or isinstance(chunk_size, bool):
            raise bad("chunk_size must be an integer")
        compat, annotations = obj.get("compat") or {}, obj.get("annotations") or {}
        if not isinstance(compat, dict) or not isinstance(annotations, dict):
            raise bad("compat and annotations must be objects")
        files: dict[str, FileRecord] = {}
        raw_files = obj.get("files") or {}
        if not isinstance(raw_files, dict):
            raise bad("files must be an object")
        for role, f in raw_files.items():
            if role not in FILE_ROLES:
                continue  # a role from a newer schema: not ours to interpret
            if not isinstance(f, dict):
                raise bad(f"files[{role!r}] must be an object")
            size, digest, sha = f.get("size"), f.get("digest"), f.get("sha256")
            if not isinstance(size, int) or not all(isinstance(v, (str, type(None))) for v in (digest, sha)):
                raise bad(f"files[{role!r}] needs an integer size and string digests")
            files[role] = FileRecord(
                size, digest, sha, parse_tree(f.get("chunk_tree"), f"files[{role!r}].chunk_tree", where)
            )
        origin = obj.get("origin")
        if origin is not None and not isinstance(origin, dict):
            raise bad("origin must be an object")
        parent_digest = obj.get("parent_digest")
        if parent_digest is not None and not (isinstance(parent_digest, str) and parent_digest.startswith("blake3:")):
            raise bad("parent_digest must be a blake3 digest string")
        parent_tree = parse_tree(obj.get("parent_chunk_tree"), "parent_chunk_tree", where)
        return cls(
            tag, parent, created, chunk_size, dict(compat), dict(annotations), files, origin, parent_digest, parent_tree
        )


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when the file does not exist.

    Raises InvalidSnapshotDir (too big, not JSON, not an object), OSError.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_JSON_BYTES:
        raise InvalidSnapshotDir(f"{path} is larger than {MAX_JSON_BYTES} bytes")
    try:
        obj = loads_json(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidSnapshotDir(f"{path} is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise InvalidSnapshotDir(f"{path} must hold a JSON object")
    return obj


def read_parent(directory: Path) -> tuple[str | None, str | None]:
    """``(parent_tag, parent_content_hash)`` from ``<directory>/snapshot.json``.

    A directory without snapshot.json is a base (forkd's fallback). Raises
    InvalidSnapshotDir for malformed metadata or a parent tag no forkd tool could create.
    """
    doc = read_json_object(directory / SNAPSHOT_JSON)
    if doc is None:
        return None, None
    parent, content_hash = doc.get("parent_tag"), doc.get("parent_content_hash")
    if parent is not None and (not isinstance(parent, str) or not is_existing_tag(parent)):
        raise InvalidSnapshotDir(f"{directory / SNAPSHOT_JSON}: parent_tag {parent!r} is not a valid tag")
    if content_hash is not None and not isinstance(content_hash, str):
        raise InvalidSnapshotDir(f"{directory / SNAPSHOT_JSON}: parent_content_hash must be a string")
    return parent, content_hash


def read_hub_meta(directory: Path) -> HubMeta | None:
    """Our metadata for the snapshot in ``directory``, or None for snapshots made by forkd itself."""
    path = directory / HUB_JSON
    obj = read_json_object(path)
    return None if obj is None else HubMeta.from_obj(obj, str(path))


def snapshot_json_for(
    directory: Path,
    base: dict[str, Any] | None,
    *,
    parent_tag: str | None,
    parent_content_hash: str | None,
    has_rootfs: bool,
    local_dirs: tuple[Path, ...] = (),
) -> dict[str, Any]:
    """forkd's snapshot.json for a snapshot that will live in ``directory``.

    Starts from ``base`` (an existing snapshot.json; unknown fields and key order kept),
    points ``vmstate``/``memory`` into ``directory`` and sets or drops the parent fields.
    A snapshot with its own ``rootfs.ext4`` (``has_rootfs``) names no ``rootfs``: its disk is that
    file, which forkd's own ``pack`` then carries inside the pack, whereas a named path would
    become the pack's sidecar ``target_path``, a path into this host's store that forkd's unpack
    recreates on every other host. Otherwise a ``rootfs`` in ``base`` is kept only when it is an
    absolute path outside ``directory`` and ``local_dirs`` (a shared image such as
    ``/var/cache/forkd/x.ext4``, as forkd records it), since one inside would dangle.
    """
    doc = dict(base or {})
    doc["vmstate"] = str(directory / VMSTATE_FILE)
    doc["memory"] = str(directory / MEMORY_FILE)
    if not isinstance(doc.get("volumes"), list):
        doc["volumes"] = []
    if parent_tag is None:
        doc.pop("parent_tag", None)
        doc.pop("parent_content_hash", None)
    else:
        doc["parent_tag"] = parent_tag
        doc["parent_content_hash"] = parent_content_hash
    if "rootfs" in doc:
        old = doc["rootfs"]
        if (
            has_rootfs
            or not isinstance(old, str)
            or not os.path.isabs(old)
            or Path(old).parent in (directory, *local_dirs)
        ):
            doc.pop("rootfs")
    return doc


def carried_fields(directory: Path) -> dict[str, Any] | None:
    """The fields of ``directory``'s snapshot.json an install cannot derive (the layer config's
    ``forkd`` object): all but ``vmstate``, ``memory``, the parent fields, and a ``rootfs``
    naming the snapshot's own file; None when that leaves only ``volumes: []`` or nothing.
    Raises InvalidSnapshotDir, OSError."""
    doc = read_json_object(directory / SNAPSHOT_JSON) or {}
    fields = {k: v for k, v in doc.items() if k not in ("vmstate", "memory", "parent_tag", "parent_content_hash")}
    rootfs = fields.get("rootfs")
    if isinstance(rootfs, str) and Path(rootfs).parent == directory:
        del fields["rootfs"]
    return None if fields in ({}, {"volumes": []}) else fields


def dump_snapshot_json(doc: dict[str, Any]) -> bytes:
    """Serialise like serde_json's ``to_string_pretty`` (two-space indent, no trailing newline)."""
    return json.dumps(doc, indent=2, ensure_ascii=False).encode()


def write_hub_meta(directory: Path, meta: HubMeta) -> None:
    write_atomically(directory / HUB_JSON, (json.dumps(meta.to_obj(), indent=2) + "\n").encode())


def write_snapshot_json(directory: Path, doc: dict[str, Any]) -> None:
    write_atomically(directory / SNAPSHOT_JSON, dump_snapshot_json(doc))


@dataclass(frozen=True)
class LocalSnapshot:
    """A snapshot in the local store, as ``images`` / ``inspect`` show it."""

    tag: str
    dir: Path
    parent_tag: str | None
    parent_content_hash: str | None
    created: str
    logical_size: int  # sum of st_size of its files
    disk_size: int  # sum of st_blocks * 512 (reflinked extents count once per file, as du does)
    compat: dict[str, Any]
    annotations: dict[str, str]
    files: dict[str, FileRecord]
    origin: dict[str, str] | None = None
    managed: bool = True  # has forkd-hub.json; False for snapshots made by forkd itself
    parent_digest: str | None = None  # blake3 of the parent's memory.bin at link time (ours, optional)
    parent_tree: tuple[int, str] | None = None  # its chunk-tree digest at link time (format v2 pulls)

    @property
    def is_base(self) -> bool:
        return self.parent_tag is None

    def to_obj(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "dir": str(self.dir),
            "parent_tag": self.parent_tag,
            "parent_content_hash": self.parent_content_hash,
            "created": self.created,
            "logical_size": self.logical_size,
            "disk_size": self.disk_size,
            "compat": dict(self.compat),
            "annotations": dict(self.annotations),
            "files": {role: rec.to_obj() for role, rec in self.files.items()},
            "origin": self.origin,
            "managed": self.managed,
            "parent_digest": self.parent_digest,
            **({"parent_chunk_tree": tree_obj(self.parent_tree)} if self.parent_tree is not None else {}),
        }


def is_snapshot_dir(path: Path) -> bool:
    """forkd's test: a directory holding snapshot.json, or vmstate (its no-snapshot.json fallback)."""
    return path.is_dir() and ((path / SNAPSHOT_JSON).is_file() or (path / VMSTATE_FILE).is_file())


def dir_sizes(directory: Path) -> tuple[int, int]:
    """``(logical, on_disk)`` bytes of the regular files directly in ``directory``."""
    logical = disk = 0
    for entry in os.scandir(directory):
        if entry.is_file(follow_symlinks=False):
            st = entry.stat(follow_symlinks=False)
            logical += st.st_size
            disk += st.st_blocks * 512
    return logical, disk
