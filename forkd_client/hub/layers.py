"""Turn a local snapshot (a chain link) into its layer: blobs, chunk maps, config, manifest.

Each chunked file is diffed against the parent's file and every changed chunk is packed into
the layer's data blob(s), in one pass over the file: the diff reads and hashes each chunk, the
builder compresses it on its threads, and, when the file's chunk tree is not recorded yet, the
same read gives it (``ChunkTrees`` calls back into that pass) (format v2: the layer is a pure function of the snapshot's files, its
parent's manifest digest and its declared metadata, never of what a hub holds; dedup against
the hub happens when the blobs are uploaded, see :mod:`.push`). File digests are chunk trees
(manifest.chunktree). Given the same snapshot and parent, the bytes are identical every time,
on any machine with the same zstd, so an interrupted push rebuilds the same data blob and
resumes its upload where it stopped, and every hub gets the same digests.

Errors: OSError (disk), ManifestError (bad local metadata).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from manifest import mediatypes as mt
from manifest.chunktree import ChunkList, file_chunk_tree
from manifest.diff import diff_files
from manifest.digest import digest_bytes
from manifest.layer import DataBlob, Frame, LayerBuilder, LayerStats
from manifest.model import Descriptor, FileInfo, LayerConfig, LayerManifest, ParentRef

from ..rootfs import outside_rootfs
from ..snapdir import SNAPSHOT_JSON, LocalSnapshot, carried_fields, read_json_object

#: ``path -> {"blake3": …, "sha256": …}``: trusted file digests (the verified-content record).
FileDigests = Callable[[Path], dict[str, str]]
#: ``(path, chunk size, compute) -> chunk-tree digest`` of a file: the recorded digest, or what
#: ``compute(path, chunk size)`` returns (then recorded: the verified-content record's ``chunk_tree``).
ChunkTrees = Callable[[Path, int, Callable[[Path, int], str]], str]


@dataclass
class BuiltLayer:
    """Everything needed to push one link. ``blobs`` maps digest → bytes or a file path."""

    manifest: bytes
    digest: str
    config: bytes
    blobs: dict[str, bytes | Path] = field(default_factory=dict)
    data_blobs: dict[str, DataBlob] = field(default_factory=dict)
    """The layer's data blobs with their frames (pushed as recipes)."""
    stats: LayerStats = field(default_factory=LayerStats)
    changed_bytes: int = 0

    def blob_size(self, digest: str) -> int:
        data = self.blobs[digest]
        return len(data) if isinstance(data, bytes) else os.path.getsize(data)


def _add_file(
    builder: LayerBuilder,
    role: str,
    path: Path,
    parent_file: Path | None,
    parent_tree: str | None,
    chunk_size: int,
    chunk_trees: ChunkTrees,
) -> str:
    """Diff ``path`` against ``parent_file`` into ``builder``, in one pass that also yields the
    file's chunk tree when it is not recorded; return that tree."""

    def diff_and_tree(p: Path, cs: int) -> str:
        chunks = ChunkList(os.path.getsize(p), cs)
        changes = diff_files(parent_file, p, cs, chunk_list=chunks)
        builder.add_file(role, changes, size=chunks.size, chunk_size=cs, digest=None, parent_digest=parent_tree)
        return chunks.digest()

    tree = chunk_trees(path, chunk_size, diff_and_tree)
    if role in builder.stats.per_file:  # that pass ran: the tree is its own
        builder.set_digest(role, tree)
    else:  # recorded already: the diff alone
        size = os.path.getsize(path)
        changes = diff_files(parent_file, path, chunk_size)
        builder.add_file(role, changes, size=size, chunk_size=chunk_size, digest=tree, parent_digest=parent_tree)
    return tree


def config_metadata(snap: LocalSnapshot, file_digests: FileDigests) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """The config's ``forkd`` object and ``annotations`` for ``snap``: snapshot.json's carried fields, a rootfs
    outside the directory named as it travels (:func:`~forkd_client.rootfs.travelling_path`: never a path into
    this host's store), and the annotations stating that image's sha256 and size when it is on this host (as
    recorded, e.g. by the pull that brought the snapshot, when it is not), from which the hub's forkd pack
    declares it (manifest.toml ``[rootfs]``). Raises InvalidSnapshotDir, OSError."""
    forkd = carried_fields(snap.dir)
    annotations = dict(snap.annotations)
    outside = outside_rootfs(snap.dir, read_json_object(snap.dir / SNAPSHOT_JSON) or {})
    if outside is None or forkd is None:
        for key in (mt.ANNOTATION_ROOTFS_SHA256, mt.ANNOTATION_ROOTFS_SIZE):
            annotations.pop(key, None)
        return forkd, annotations
    forkd["rootfs"] = outside.travels_as
    if outside.image is not None:
        annotations[mt.ANNOTATION_ROOTFS_SHA256] = file_digests(outside.image)["sha256"]
        annotations[mt.ANNOTATION_ROOTFS_SIZE] = str(os.path.getsize(outside.image))
    return forkd, annotations


def _compat(raw: dict) -> dict:
    return {k: v for k, v in raw.items() if isinstance(v, (str, int)) and not isinstance(v, bool)}


def build_layer(
    snap: LocalSnapshot,
    parent: LocalSnapshot | None,
    parent_manifest: str | None,
    work_dir: Path,
    file_digests: FileDigests,
    chunk_trees: ChunkTrees,
    *,
    chunk_size: int,
    on_frame: Callable[[int, Frame, bytes], None] | None = None,
) -> BuiltLayer:
    """Build the layer of ``snap`` on ``parent`` (whose pushed manifest digest is ``parent_manifest``).

    ``on_frame`` sees every new frame as it is appended to a data blob (:class:`LayerBuilder`); the
    data blobs in ``BuiltLayer.data_blobs`` are in the order of its blob numbers."""
    chunked = [role for role in mt.CHUNKED_FILES if (snap.dir / role).is_file()]
    builder = LayerBuilder(work_dir, on_frame=on_frame)
    files: dict[str, FileInfo] = {}
    try:
        for role in chunked:
            path = snap.dir / role
            parent_file = parent.dir / role if parent is not None and (parent.dir / role).is_file() else None
            parent_tree = chunk_trees(parent_file, chunk_size, file_chunk_tree) if parent_file is not None else None
            size = os.path.getsize(path)
            tree = _add_file(builder, role, path, parent_file, parent_tree, chunk_size, chunk_trees)
            files[role] = FileInfo(size, tree, file_digests(path)["sha256"], chunk_size)
        maps, data_blobs = builder.finish()
    except BaseException:
        builder.abort()
        raise

    layer = BuiltLayer(b"", "", b"", stats=builder.stats)
    layer.changed_bytes = sum(builder.stats.per_file.values()) * chunk_size
    vmstate = (snap.dir / mt.VMSTATE_FILE).read_bytes()
    vm_blob = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=False).compress(vmstate)
    files[mt.VMSTATE_FILE] = FileInfo(len(vmstate), str(digest_bytes(vmstate)), str(digest_bytes(vmstate, "sha256")))

    descriptors = [Descriptor.for_bytes(mt.VMSTATE, vm_blob)]
    layer.blobs[descriptors[0].digest] = vm_blob
    for role in chunked:
        data = maps[role].to_json()
        desc = Descriptor.for_bytes(mt.CHUNK_MAP, data, **{mt.ANNOTATION_FILE: role})
        descriptors.append(desc)
        layer.blobs[desc.digest] = data
    for blob in data_blobs:
        layer.blobs[blob.digest] = blob.path
        layer.data_blobs[blob.digest] = blob
        descriptors.append(Descriptor(mt.DATA_BLOB, blob.digest, blob.size))

    forkd, annotations = config_metadata(snap, file_digests)
    config = LayerConfig(
        created=snap.created,
        files=files,
        parent=ParentRef(parent_manifest, parent.tag) if parent is not None and parent_manifest else None,
        compat=_compat(snap.compat),
        annotations=annotations,
        forkd=forkd,
    )
    layer.config = config.to_json()
    config_desc = Descriptor.for_bytes(mt.CONFIG, layer.config)
    layer.blobs[config_desc.digest] = layer.config
    manifest = LayerManifest(config_desc, tuple(descriptors), {mt.ANNOTATION_CREATED: snap.created})
    layer.manifest = manifest.to_json()
    layer.digest = str(digest_bytes(layer.manifest, "sha256"))
    return layer
