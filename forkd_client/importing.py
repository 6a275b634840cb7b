"""Store operations that make a snapshot from files: import, tag (clone) and compact.

All three follow the store's one install path: put the files into a fresh directory under
``.staging/`` (cloned with reflink where the filesystem can, holes kept), let
:meth:`SnapshotStore.prepare` hash and describe them, then :meth:`SnapshotStore.commit`
renames the directory into ``snapshots/``. Any error before the rename leaves nothing
behind (the staging directory is deleted, moved source files are put back).

Errors: forkd_client.errors (InvalidTag, SnapshotNotFound, SnapshotExists,
InvalidSnapshotDir, ChainBroken, ParentContentMismatch) and OSError.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from manifest.holes import fill_unsafe_holes
from manifest.mediatypes import MEMORY_FILE, VMSTATE_FILE

from .errors import InvalidSnapshotDir, InvalidTag, SnapshotExists, SnapshotNotFound
from .install import BOTH_DIGESTS, PrepareSpec, clone_into
from .snapdir import (
    FILE_ROLES,
    SNAPSHOT_JSON,
    LocalSnapshot,
    read_hub_meta,
    read_json_object,
    read_parent,
    validate_tag,
)
from .vmmcompat import to_manifest_compat

if TYPE_CHECKING:
    from .store import SnapshotStore

#: annotation a compacted snapshot carries, naming the chain head it was made from
ANNOTATION_COMPACTED_FROM = "dev.forkd.compacted-from"
#: written by our VMM drivers next to a snapshot: {"compat": {...}, "rootfs": ...}
VMM_RECORD = "vmm.json"
#: an optional plain JSON object of compat fields, merged over vmm.json's
COMPAT_JSON = "compat.json"


def read_source_compat(src: Path) -> dict[str, Any]:
    """Compat facts found in an import source: ``vmm.json``'s ``compat``, then ``compat.json``.

    Both are mapped to the manifest vocabulary (``vmmVersion``, ``memMiB`` …, see
    :mod:`forkd_client.vmmcompat`), which is what the store keeps. Raises InvalidSnapshotDir
    when either file is not the JSON object it should be or holds a value that is neither a
    string nor an integer.
    """
    compat: dict[str, Any] = {}
    record = read_json_object(src / VMM_RECORD)
    if record is not None:
        if not isinstance(record.get("compat"), dict):
            raise InvalidSnapshotDir(f"{src / VMM_RECORD} has no 'compat' object")
        compat.update(_manifest_compat(record["compat"], src / VMM_RECORD))
    extra = read_json_object(src / COMPAT_JSON)
    if extra is not None:
        compat.update(_manifest_compat(extra, src / COMPAT_JSON))
    return compat


def _manifest_compat(raw: Mapping[str, Any], where: Path) -> dict[str, Any]:
    try:
        return dict(to_manifest_compat(raw))
    except ValueError as e:
        raise InvalidSnapshotDir(f"{where}: {e}") from None


def import_snapshot(
    store: SnapshotStore,
    src: Path,
    tag: str,
    *,
    parent: str | None = None,
    move: bool = False,
    force: bool = False,
    compat: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> LocalSnapshot:
    """Install ``src`` (``vmstate`` + ``memory.bin`` [+ ``rootfs.ext4``]) as snapshot ``tag``.

    Files are cloned (reflink where possible, holes kept), or moved with ``move``. memory.bin
    (and every other file) is hashed once with blake3 and sha256 and recorded. With
    ``parent`` the snapshot is a chain link whose ``parent_content_hash`` is the sha256 of
    the parent's memory.bin. A ``snapshot.json`` in ``src`` is kept (unknown fields, volumes)
    but its paths and parent fields are replaced. Compat facts come from ``vmm.json`` /
    ``compat.json`` in ``src``, then ``compat``, all stored in the manifest vocabulary.

    Raises InvalidTag, InvalidSnapshotDir (src lacks a file or has bad JSON),
    SnapshotNotFound (the parent), SnapshotExists (``tag`` taken and not ``force``), ValueError
    (a ``compat`` value that is neither a string nor an integer), OSError.
    """
    validate_tag(tag)
    if not src.is_dir():
        raise InvalidSnapshotDir(f"{src} is not a directory")
    for role in (VMSTATE_FILE, MEMORY_FILE):
        if not (src / role).is_file():
            raise InvalidSnapshotDir(f"{src} has no {role}; a snapshot directory needs vmstate and memory.bin")
    if not force and store.exists(tag):
        raise SnapshotExists(tag, replaceable=True)
    parent_hash = None
    if parent is not None:
        _check_parent(store, parent, tag)
        parent_hash = store.memory_sha256(parent)
    merged_compat = {**read_source_compat(src), **to_manifest_compat(compat or {})}
    base_json = read_json_object(src / SNAPSHOT_JSON)
    present = [role for role in FILE_ROLES if (src / role).is_file()]
    with store.staging(f"import-{tag}") as staged:
        moved: list[tuple[Path, Path]] = []  # renamed out of src: put back on failure
        copied: list[Path] = []  # cloned because src is on another filesystem: delete after success
        try:
            for role in present:
                if move:
                    try:
                        os.rename(src / role, staged / role)
                        moved.append((src / role, staged / role))
                        continue
                    except OSError as e:
                        if e.errno != errno.EXDEV:
                            raise
                    copied.append(src / role)
                clone_into(src / role, staged / role)
            if parent is not None:  # a hole in a link would read as the parent's bytes in forkd
                fill_unsafe_holes(staged / MEMORY_FILE, store.path(parent) / MEMORY_FILE)
            store.prepare(
                staged,
                PrepareSpec(
                    tag,
                    parent=parent,
                    parent_content_hash=parent_hash,
                    compat=merged_compat,
                    annotations=annotations,
                    snapshot_json=base_json,
                    local_dirs=(src,),
                ),
            )
            installed = store.commit([(staged, tag)], force=force)[0]
        except BaseException:
            for original, now in reversed(moved):
                if now.exists():
                    os.rename(now, original)
            raise
    for path in copied:
        path.unlink(missing_ok=True)
    return installed


def _check_parent(store: SnapshotStore, parent: str, tag: str) -> None:
    """The parent must exist, and making ``tag`` its child must not close a loop."""
    if not store.exists(parent):
        raise SnapshotNotFound(parent, f"parent snapshot {parent!r} not found")
    seen: set[str] = set()
    cursor: str | None = parent
    while cursor is not None and cursor not in seen and store.exists(cursor):
        if cursor == tag:
            raise InvalidTag(
                f"snapshot {tag!r} cannot have {parent!r} as parent: {parent!r} descends from {tag!r}"
                if parent != tag
                else f"snapshot {tag!r} cannot be its own parent"
            )
        seen.add(cursor)
        cursor = read_parent(store.path(cursor))[0]


def clone_snapshot(store: SnapshotStore, src: str, dst: str) -> LocalSnapshot:
    """A new snapshot ``dst`` whose files are clones of ``src``'s, with the same parent.

    The parent hash is copied, not recomputed (the content is the same), and so are the
    created time, compat, annotations and origin. Digests trusted for ``src``'s files are
    recorded for the clones. Raises SnapshotNotFound, SnapshotExists, InvalidTag, OSError.
    """
    validate_tag(dst)
    source = store.get(src)
    if store.exists(dst):
        raise SnapshotExists(dst)
    meta = read_hub_meta(source.dir)
    return _install_clone(
        store,
        source,
        dst,
        parent=source.parent_tag,
        parent_hash=source.parent_content_hash,
        created=meta.created if meta else None,
        compat=source.compat,
        annotations=source.annotations,
        origin=source.origin,
    )


def compact(store: SnapshotStore, src: str, dst: str) -> LocalSnapshot:
    """Verify ``src``'s chain, then install ``dst``: a base whose memory.bin is the head's image.

    Local links are fully materialised (as forkd's are), so the head's memory.bin already
    is the assembled image and compacting is a clone. vmstate and rootfs come from the head;
    the parent fields are dropped; compat and annotations are kept and
    ``dev.forkd.compacted-from`` names ``src``.

    Raises ChainBroken, ParentContentMismatch, SnapshotNotFound, SnapshotExists, InvalidTag.
    """
    validate_tag(dst)
    if dst == src or store.exists(dst):
        raise SnapshotExists(dst)
    head = store.verify_chain(src)[-1]
    annotations = {**head.annotations, ANNOTATION_COMPACTED_FROM: src}
    return _install_clone(
        store,
        head,
        dst,
        parent=None,
        parent_hash=None,
        created=None,
        compat=head.compat,
        annotations=annotations,
        origin=None,
    )


def _install_clone(
    store: SnapshotStore,
    source: LocalSnapshot,
    dst: str,
    *,
    parent: str | None,
    parent_hash: str | None,
    created: str | None,
    compat: Mapping[str, Any],
    annotations: Mapping[str, str],
    origin: Mapping[str, str] | None,
) -> LocalSnapshot:
    base_json = read_json_object(source.dir / SNAPSHOT_JSON)
    with store.staging(f"clone-{dst}") as staged:
        known = {}
        for role in FILE_ROLES:
            if (source.dir / role).is_file():
                clone_into(source.dir / role, staged / role)
                known[role] = store.verified.cached(source.dir / role)
        if parent is not None:  # a link's holes over parent data (an older install's) become real zeros
            fill_unsafe_holes(staged / MEMORY_FILE, store.path(parent) / MEMORY_FILE)
        store.prepare(
            staged,
            PrepareSpec(
                dst,
                parent=parent,
                parent_content_hash=parent_hash,
                compat=compat,
                annotations=annotations,
                origin=origin,
                created=created,
                known_digests=known,
                algorithms=BOTH_DIGESTS,
                snapshot_json=base_json,
                local_dirs=(source.dir,),
            ),
        )
        return store.commit([(staged, dst)])[0]
