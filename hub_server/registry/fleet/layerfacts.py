"""What placement needs to know of a layer, read once from its chunk maps and kept (layers are immutable).

A layer's **frames**: each distinct non-zero chunk digest its chunk maps list, with the length of its
zstd frame, in format order (docs/manifest-format.md §3: ``memory.bin`` entries by index, then
``rootfs.ext4``'s; a chunk repeated inside the layer has one frame). That is exactly what ``forkd pull``
fetches of the layer when the host holds none of it: each frame once. Per file, the **entries**
(chunk index → digest) decode a host's partial summary, a bitmap over the file's chunk indexes.

:class:`LayerFactsCache` keeps them least recently used first out once ``max_chunks`` entries are held
(a 16 GiB base is 262,144: about 50 MB of Python objects); a layer is read again when next needed.

Errors: ``HubError(MANIFEST_INVALID / MANIFEST_BLOB_UNKNOWN)`` from reading a damaged or missing chunk map.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import col, select

from hub_server.db.models import Blob, BlobRole, Manifest, ManifestBlob
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.blobs import read_blob_bytes
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.sql import batched
from manifest import mediatypes as mt
from manifest.errors import ManifestError
from manifest.model import ChunkMap

__all__ = ["FileEntries", "LayerFacts", "LayerFactsCache", "facts_from_maps"]

#: Entries kept in memory by default (about 16 bases of 16 GiB).
DEFAULT_MAX_CHUNKS = 4 << 20


@dataclass(frozen=True)
class FileEntries:
    """One chunked file of a layer: its geometry, its data entries (chunk index → digest) in index order, and
    the indexes it makes zero."""

    role: str
    size: int
    chunk_size: int
    indexes: tuple[int, ...]
    digests: tuple[str, ...]
    zeros: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        """Chunks in the file (a partial summary's bitmap has this many bits)."""
        return -(-self.size // self.chunk_size)


@dataclass(frozen=True)
class LayerFacts:
    """A layer as placement sees it (module docstring)."""

    digest: str
    parent: str | None
    vmstate_bytes: int
    frames: dict[str, int]
    """Distinct chunk digest → frame length, in format order."""
    files: dict[str, FileEntries] = field(default_factory=dict)
    compat: dict[str, Any] = field(default_factory=dict)
    chunk_size: int = 65536

    @property
    def frame_bytes(self) -> int:
        return sum(self.frames.values())

    @property
    def weight(self) -> int:
        return max(1, sum(len(f.indexes) for f in self.files.values()))


def facts_from_maps(
    digest: str, parent: str | None, vmstate_bytes: int, maps: Iterable[ChunkMap], compat: dict[str, Any] | None = None
) -> LayerFacts:
    """The facts of a layer from its parsed chunk maps (any order: files are taken in format order)."""
    by_role = {m.file: m for m in maps}
    frames: dict[str, int] = {}
    files: dict[str, FileEntries] = {}
    chunk_size = 65536
    for role in mt.CHUNKED_FILES:
        chunk_map = by_role.get(role)
        if chunk_map is None:
            continue
        chunk_size = chunk_map.chunk_size
        indexes: list[int] = []
        digests: list[str] = []
        zeros: list[int] = []
        for entry in chunk_map.entries:
            if entry.digest is None:
                zeros.append(entry.index)
                continue
            indexes.append(entry.index)
            digests.append(entry.digest)
            frames.setdefault(entry.digest, entry.length)
        files[role] = FileEntries(
            role, chunk_map.size, chunk_map.chunk_size, tuple(indexes), tuple(digests), tuple(zeros)
        )
    return LayerFacts(digest, parent, vmstate_bytes, frames, files, dict(compat or {}), chunk_size)


class LayerFactsCache:
    """Layer facts by manifest digest, read from the database and the blob store (module docstring)."""

    def __init__(self, ctx: RegistryContext, max_chunks: int = DEFAULT_MAX_CHUNKS) -> None:
        self.ctx = ctx
        self.max_chunks = max_chunks
        self._facts: OrderedDict[str, LayerFacts] = OrderedDict()
        self._held = 0
        self._lock = asyncio.Lock()

    def cached(self, digest: str) -> LayerFacts | None:
        facts = self._facts.get(digest)
        if facts is not None:
            self._facts.move_to_end(digest)
        return facts

    def remember(self, facts: LayerFacts) -> None:
        """Keep ``facts`` (benchmarks and tests build them without a store)."""
        if facts.digest in self._facts:
            return
        self._facts[facts.digest] = facts
        self._held += facts.weight
        while self._held > self.max_chunks and len(self._facts) > 1:
            _, old = self._facts.popitem(last=False)
            self._held -= old.weight

    async def get_many(self, digests: Iterable[str]) -> dict[str, LayerFacts]:
        """The facts of each of ``digests`` that is a forkd snapshot layer the hub holds (others are left out).
        Layers not cached are read one request at a time (a layer two requests need is read once).

        Raises: HubError(MANIFEST_INVALID / MANIFEST_BLOB_UNKNOWN) for a damaged or missing chunk map.
        """
        wanted = list(dict.fromkeys(digests))
        out = {d: f for d in wanted if (f := self.cached(d)) is not None}
        if len(out) < len(wanted):
            async with self._lock:
                out.update({d: f for d in wanted if d not in out and (f := self.cached(d)) is not None})
                missing = [d for d in wanted if d not in out]
                for digest, facts in (await self._read(missing)).items() if missing else ():
                    if facts is not None:
                        self.remember(facts)
                        out[digest] = facts
        return out

    async def _read(self, digests: list[str]) -> dict[str, LayerFacts | None]:
        rows: dict[str, Manifest] = {}
        blobs: dict[str, list[tuple[str, str, int]]] = {}
        async with self.ctx.sessions() as session:
            for batch in batched(digests):
                for row in (await session.exec(select(Manifest).where(col(Manifest.digest).in_(batch)))).all():
                    if row.artifact_type in mt.LAYER_ARTIFACTS:
                        rows[row.digest] = row
                listed = await session.exec(
                    select(ManifestBlob.manifest_digest, ManifestBlob.blob_digest, ManifestBlob.role, Blob.size)
                    .join(Blob, Blob.digest == ManifestBlob.blob_digest)  # type: ignore[arg-type]
                    .where(
                        col(ManifestBlob.manifest_digest).in_(batch),
                        col(ManifestBlob.role).in_([BlobRole.CHUNK_MAP, BlobRole.VMSTATE]),
                    )
                )
                for manifest, blob, role, size in listed.all():
                    blobs.setdefault(manifest, []).append((blob, role, size))
        out: dict[str, LayerFacts | None] = {}
        for digest in digests:
            found = rows.get(digest)
            if found is None:
                out[digest] = None
                continue
            maps = []
            vmstate = 0
            for blob, role, size in blobs.get(digest, []):
                if role == BlobRole.VMSTATE:
                    vmstate = size
                    continue
                raw = await read_blob_bytes(self.ctx, blob, self.ctx.limits.chunk_map_bytes, "chunk map")
                maps.append(await asyncio.to_thread(_parse, raw, blob))
            out[digest] = await asyncio.to_thread(
                facts_from_maps, digest, found.parent_digest, vmstate, maps, dict(found.compat or {})
            )
        return out


def _parse(raw: bytes, digest: str) -> ChunkMap:
    try:
        return ChunkMap.from_json(raw, limit=len(raw) + 1)
    except ManifestError as e:  # checked at push: stored bytes that no longer parse are damage
        raise HubError(ErrorCode.MANIFEST_INVALID, f"stored chunk map {digest} does not parse: {e}", {}) from None
