"""forkd ``.forkd-snapshot.tar.zst`` packs to and from the local store.

``pack`` verifies the chain ending at a tag and writes it with
:func:`manifest.forkd_pack.write_pack`: a lone base as a v1 pack, a chain as v2 (every
link root → head, each a full memory image, exactly as forkd writes them).

``unpack`` reads the manifest first and checks every destination tag before extracting a
byte, extracts with :func:`manifest.forkd_unpack.read_pack` into ``.staging/`` (declared
entries only, sha256 verified while streaming), checks that each link's
``parent_content_hash`` is the sha256 of its parent's memory.bin (the previous link, or
for a partial chain a snapshot already in the store), then installs all links in one
commit. The sha256 digests verified while streaming are recorded in the VerifiedRecord;
blake3 is computed later, when something first needs it.

The head's rootfs travels as forkd's sidecar ``<sha16>.rootfs.zst`` beside the pack, and is
installed from beside the pack file where :mod:`forkd_client.rootfs` allows (inside the allowed
roots only, never replacing a file; else in the store's own ``rootfs/``).

Errors: forkd_client.errors (InvalidTag, SnapshotExists, SnapshotNotFound, ChainBroken,
ParentContentMismatch, InvalidSnapshotDir), ``manifest.forkd_pack.PackError`` and its
subclasses (a bad pack), OSError.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from manifest.forkd_pack import PackLink, UnpackedLink, write_pack
from manifest.forkd_unpack import read_pack, read_pack_manifest
from manifest.holes import fill_unsafe_holes
from manifest.mediatypes import ANNOTATION_BASE_IMAGE, ANNOTATION_DESCRIPTION, MEMORY_FILE, ROOTFS_FILE
from manifest.rootfs_sidecar import RootfsInfo, write_sidecar

from .errors import ChainBroken, InvalidTag, ParentContentMismatch, SnapshotExists
from .install import PrepareSpec
from .rootfs import packed_rootfs, place_rootfs
from .snapdir import (
    FILE_ROLES,
    SNAPSHOT_JSON,
    LocalSnapshot,
    dump_snapshot_json,
    read_json_object,
    rfc3339,
    validate_existing_tag,
)

if TYPE_CHECKING:
    from .store import SnapshotStore


def pack(
    store: SnapshotStore, tag: str, out: Path, *, description: str | None = None, base_image: str | None = None
) -> Path:
    """Write snapshot ``tag`` and its ancestors to the forkd pack ``out``; returns ``out``.

    Raises SnapshotNotFound, ChainBroken, ParentContentMismatch (checked before packing),
    PackError (e.g. a tag with a dot, which forkd's pack reader refuses), OSError.
    """
    chain = store.verify_chain(tag)
    links: list[PackLink] = []
    rootfs: dict | None = None
    for snap in chain:
        doc = read_json_object(snap.dir / SNAPSHOT_JSON)
        skip: tuple[str, ...] = ()
        if doc is not None:
            packed = packed_rootfs(snap.dir, doc) if snap is chain[-1] else None
            if packed is not None:  # forkd's way: the image beside the pack, snapshot.json naming its target
                info, _ = write_sidecar(packed[0], Path(out).parent, packed[1])
                rootfs, doc["rootfs"] = info.to_table(), info.target_path
                skip = (ROOTFS_FILE,) if packed[0] == snap.dir / ROOTFS_FILE else ()
            elif isinstance(doc.get("rootfs"), str) and Path(doc["rootfs"]).parent == snap.dir:
                del doc["rootfs"]  # a path into this directory would dangle wherever forkd unpacks it
        links.append(
            PackLink(
                snap.tag,
                snap.dir,
                snap.parent_tag,
                snap.parent_content_hash,
                snapshot_json=None if doc is None else dump_snapshot_json(doc),
                skip=skip,
            )
        )
    return write_pack(links, Path(out), description=description, base_image=base_image, rootfs=rootfs)


def unpack(
    store: SnapshotStore, file: Path, *, tag: str | None = None, force: bool = False, warnings: list[str] | None = None
) -> list[LocalSnapshot]:
    """Install the snapshots of the forkd pack ``file``; returns them root → head.

    ``tag`` renames a single-snapshot pack; a chain keeps the publisher's link tags
    (as in forkd). Tags follow forkd's CLI rule, dots allowed (``py-3.12``), as forkd's
    unpack installs them. ``force`` replaces existing snapshots of the same tags.

    Raises InvalidTag (bad tag, or ``tag`` with a multi-link chain), SnapshotExists,
    ChainBroken (the pack's root names a parent that is not installed),
    ParentContentMismatch, PackError, OSError.
    """
    declared = read_pack_manifest(file)
    rootfs = RootfsInfo.from_table(declared.rootfs) if declared.rootfs is not None else None
    if tag is not None and len(declared.links) > 1:
        raise InvalidTag(
            f"--tag cannot rename a chain pack of {len(declared.links)} links; its links install under their own tags"
        )
    targets = [_target_tag(tag or link.tag) for link in declared.links]
    if not force:
        for target in targets:
            if store.exists(target):
                raise SnapshotExists(target, replaceable=True)
    with store.staging("unpack") as staged:
        unpacked = read_pack(file, staged)
        parents = _checked_parents(store, unpacked.links, targets)
        placed = place_rootfs(store.root, rootfs, Path(file).parent, warnings) if rootfs is not None else None
        created = _created(unpacked.created_at)
        for i, (link, target) in enumerate(zip(unpacked.links, targets, strict=False)):
            annotations = {}
            if i == len(targets) - 1:
                if unpacked.description:
                    annotations[ANNOTATION_DESCRIPTION] = unpacked.description
                if unpacked.base_image:
                    annotations[ANNOTATION_BASE_IMAGE] = unpacked.base_image
            known = {f.path: {"sha256": f"sha256:{f.sha256}"} for f in link.files if f.path in FILE_ROLES}
            parent, parent_hash = parents[i]
            if parent is not None:  # zeros extracted as holes must not read as the parent's bytes
                parent_memory = (unpacked.links[i - 1].directory if i else store.path(parent)) / MEMORY_FILE
                fill_unsafe_holes(link.directory / MEMORY_FILE, parent_memory)
            doc = read_json_object(link.directory / SNAPSHOT_JSON) or {}
            if placed is not None and i == len(targets) - 1:
                doc["rootfs"] = str(placed)  # where the image is on this host (forkd: target_path)
            store.prepare(
                link.directory,
                PrepareSpec(
                    target,
                    parent=parent,
                    parent_content_hash=parent_hash,
                    annotations=annotations,
                    created=created,
                    known_digests=known,
                    algorithms=("sha256",),
                    snapshot_json=doc,
                    forkd_cli_tag=True,
                ),
            )
        return store.commit(
            [(link.directory, target) for link, target in zip(unpacked.links, targets, strict=False)],
            force=force,
            forkd_cli_tag=True,
        )


def _target_tag(tag: str) -> str:
    """``tag`` if forkd's CLI (``validate_tag``: ``[A-Za-z0-9_][A-Za-z0-9._-]{0,63}``) accepts it."""
    try:
        return validate_existing_tag(tag)
    except InvalidTag:
        raise InvalidTag(f"pack tag {tag!r} is not a valid tag ([A-Za-z0-9_][A-Za-z0-9._-]{{0,63}})") from None


def _checked_parents(
    store: SnapshotStore, links: tuple[UnpackedLink, ...], targets: list[str]
) -> list[tuple[str | None, str | None]]:
    """``(parent_tag, parent_content_hash)`` per link, after checking every hash against its parent."""
    out: list[tuple[str | None, str | None]] = []
    for i, link in enumerate(links):
        doc = read_json_object(link.directory / SNAPSHOT_JSON) or {}
        parent = link.parent_tag or _str_or_none(doc.get("parent_tag"))
        expected = link.parent_content_hash or _str_or_none(doc.get("parent_content_hash"))
        if parent is None:
            out.append((None, None))
            continue
        if i > 0:
            actual = next(f.sha256 for f in links[i - 1].files if f.path == MEMORY_FILE)
            parent = targets[i - 1]
        elif store.exists(parent):
            actual = store.memory_sha256(parent)
        else:
            raise ChainBroken(
                f"pack snapshot {targets[i]!r} names parent {parent!r}, which is neither in the pack "
                "nor installed; unpack or pull the parent first",
                link=targets[i],
                missing=parent,
            )
        if expected != actual:
            raise ParentContentMismatch(targets[i], parent, expected, actual)
        out.append((parent, actual))
    return out


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _created(created_at: str) -> str:
    """The pack's created_at when it is a timestamp, normalised to our RFC 3339 form; else now."""
    try:
        return rfc3339(datetime.fromisoformat(created_at).timestamp())
    except (ValueError, OverflowError, OSError):
        return rfc3339()
