"""Turn a local snapshot (a chain link) into its layer: blobs, chunk maps, config, manifest.

Two passes over each chunked file: the first diffs it against the parent's file and
collects the changed chunk digests (so the hub can be asked which it already holds); the
second reads only those changed chunks and packs the ones the hub lacks into one data blob.
Given the same snapshot, parent and hub answers, the bytes are identical every time, so an
interrupted push rebuilds the same data blob and resumes its upload where it stopped.

Errors: OSError (disk), ManifestError (bad local metadata).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from manifest import mediatypes as mt
from manifest.diff import ChunkChange, diff_files
from manifest.digest import digest_bytes
from manifest.layer import ChunkLocation, LayerBuilder, LayerStats
from manifest.model import Descriptor, FileInfo, LayerConfig, LayerManifest, ParentRef

from ..snapdir import LocalSnapshot, carried_fields

#: ``digests -> {digest: location}``: what the hub already holds (chunk negotiation).
KnownChunks = Callable[[list[str]], dict[str, ChunkLocation]]
#: ``blob digest -> size``: sizes of reused data blobs, for their descriptors.
BlobSize = Callable[[str], int]
#: ``path -> {"blake3": …, "sha256": …}``: trusted file digests (the verified-content record).
FileDigests = Callable[[Path], dict[str, str]]


@dataclass
class BuiltLayer:
    """Everything needed to push one link. ``blobs`` maps digest → bytes or a file path."""

    manifest: bytes
    digest: str
    config: bytes
    blobs: dict[str, bytes | Path] = field(default_factory=dict)
    stats: LayerStats = field(default_factory=LayerStats)
    changed_bytes: int = 0

    def blob_size(self, digest: str) -> int:
        data = self.blobs[digest]
        return len(data) if isinstance(data, bytes) else os.path.getsize(data)


def _changed_indexes(parent: Path | None, child: Path, chunk_size: int) -> list[tuple[int, str | None]]:
    return [(c.index, c.digest) for c in diff_files(parent, child, chunk_size)]


def _reread(path: Path, changes: list[tuple[int, str | None]], chunk_size: int) -> Iterator[ChunkChange]:
    size = os.path.getsize(path)
    with open(path, "rb", buffering=0) as f:
        for index, digest in changes:
            if digest is None:
                yield ChunkChange(index, None, None)
                continue
            offset = index * chunk_size
            yield ChunkChange(index, digest, os.pread(f.fileno(), min(chunk_size, size - offset), offset))


def _compat(raw: dict) -> dict:
    return {k: v for k, v in raw.items() if isinstance(v, (str, int)) and not isinstance(v, bool)}


def build_layer(
    snap: LocalSnapshot,
    parent: LocalSnapshot | None,
    parent_manifest: str | None,
    work_dir: Path,
    known_chunks: KnownChunks,
    blob_size: BlobSize,
    file_digests: FileDigests,
    *,
    chunk_size: int,
) -> BuiltLayer:
    """Build the layer of ``snap`` on ``parent`` (whose pushed manifest digest is ``parent_manifest``)."""
    chunked = [role for role in mt.CHUNKED_FILES if (snap.dir / role).is_file()]
    changes = {}
    for role in chunked:
        parent_file = parent.dir / role if parent is not None and (parent.dir / role).is_file() else None
        changes[role] = (parent_file, _changed_indexes(parent_file, snap.dir / role, chunk_size))
    wanted = sorted({d for _, items in changes.values() for _, d in items if d is not None})
    known = known_chunks(wanted) if wanted else {}
    sizes = {loc.blob: loc.blob_size for loc in known.values() if loc.blob_size is not None}

    builder = LayerBuilder(work_dir, known)
    files: dict[str, FileInfo] = {}
    try:
        for role in chunked:
            path = snap.dir / role
            digests = file_digests(path)
            parent_file, items = changes[role]
            parent_digest = file_digests(parent_file)["blake3"] if parent_file is not None else None
            size = os.path.getsize(path)
            builder.add_file(role, _reread(path, items, chunk_size), size=size,
                             chunk_size=chunk_size, digest=digests["blake3"], parent_digest=parent_digest)
            files[role] = FileInfo(size, digests["blake3"], digests["sha256"], chunk_size)
        maps, data_blobs = builder.finish()
    except BaseException:
        builder.abort()
        raise

    layer = BuiltLayer(b"", "", b"", stats=builder.stats)
    layer.changed_bytes = sum(len(items) for _, items in changes.values()) * chunk_size
    vmstate = (snap.dir / mt.VMSTATE_FILE).read_bytes()
    vm_blob = zstandard.ZstdCompressor(level=3).compress(vmstate)
    files[mt.VMSTATE_FILE] = FileInfo(len(vmstate), str(digest_bytes(vmstate)), str(digest_bytes(vmstate, "sha256")))

    descriptors = [Descriptor.for_bytes(mt.VMSTATE, vm_blob)]
    layer.blobs[descriptors[0].digest] = vm_blob
    for role in chunked:
        data = maps[role].to_json()
        desc = Descriptor.for_bytes(mt.CHUNK_MAP, data, **{mt.ANNOTATION_FILE: role})
        descriptors.append(desc)
        layer.blobs[desc.digest] = data
    own = {b.digest: b for b in data_blobs}
    referenced = list(dict.fromkeys(d for role in chunked for d in maps[role].blobs))
    for digest in referenced:
        if digest in own:
            layer.blobs[digest] = own[digest].path
            size = own[digest].size
        else:
            size = sizes.get(digest) or blob_size(digest)
        descriptors.append(Descriptor(mt.DATA_BLOB, digest, size))

    config = LayerConfig(
        created=snap.created,
        files=files,
        parent=ParentRef(parent_manifest, parent.tag) if parent is not None and parent_manifest else None,
        compat=_compat(snap.compat),
        annotations=dict(snap.annotations),
        forkd=carried_fields(snap.dir),
    )
    layer.config = config.to_json()
    config_desc = Descriptor.for_bytes(mt.CONFIG, layer.config)
    layer.blobs[config_desc.digest] = layer.config
    manifest = LayerManifest(config_desc, tuple(descriptors), {mt.ANNOTATION_CREATED: snap.created})
    layer.manifest = manifest.to_json()
    layer.digest = str(digest_bytes(layer.manifest))
    return layer
