"""Format v2: proving a pushed layer's file digests from its chunk digests, in O(chunks), before it is accepted.

A v2 file digest is a chunk tree (:mod:`manifest.chunktree`): blake3 over the file's size, chunk
size and ordered chunk digests. The hub already proves every chunk digest a chunk map names (each
new frame is decompressed and hashed at push, :mod:`registry.verify`; frames verified before are
trusted), so the file digest a layer declares can be proven without reading any data: take the
parent file's chunk list, apply the layer's map, hash the list. A layer whose declared digest does
not hold would be unpullable (every client and every pack build would fail on it): refused with
``MANIFEST_INVALID`` naming the file.

The parent's chunk list comes from the chain's chunk maps, base → parent, each list checked
against the digest that link declares (a link stored before this check, damaged, is named too).
Lists are cached by their chunk-tree digest (:class:`ChunkListCache`): the key is the hash of the
value, so the cache is safe to share, and pushing a chain link by link reads each map once.

Errors: ``HubError(MANIFEST_INVALID)`` (detail ``file``, ``digest``: the declared one, ``actual``),
``HubError(MANIFEST_BLOB_UNKNOWN)`` when an ancestor's chunk map is missing from storage.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from functools import partial

import anyio.to_thread
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import BlobRole, ManifestBlob
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.blobs import read_blob_bytes
from hub_server.registry.core.context import RegistryContext
from manifest.chunktree import DIGEST_BYTES, ChunkList, apply_map
from manifest.errors import ManifestError
from manifest.model import ChunkMap

__all__ = ["ChunkListCache", "chunk_lists", "maps_of", "prove_file_digests"]

#: Digest bytes the shared cache keeps (64 MiB: the lists of ~8 files of 16 GiB at 64 KiB chunks).
CACHE_BYTES = 64 << 20


class ChunkListCache:
    """A bounded LRU of chunk lists keyed by their chunk-tree digest (thread-safe)."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._lists: OrderedDict[str, ChunkList] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, digest: str) -> ChunkList | None:
        with self._lock:
            found = self._lists.get(digest)
            if found is not None:
                self._lists.move_to_end(digest)
            return found

    def put(self, digest: str, chunk_list: ChunkList) -> None:
        """Keep ``chunk_list`` under ``digest``, which must be ``chunk_list.digest()``."""
        cost = chunk_list.geometry.count * DIGEST_BYTES
        if cost > self.max_bytes:
            return
        with self._lock:
            if digest in self._lists:
                return
            self._lists[digest] = chunk_list
            self._bytes += cost
            while self._bytes > self.max_bytes:
                _, dropped = self._lists.popitem(last=False)
                self._bytes -= dropped.geometry.count * DIGEST_BYTES


#: Shared by every hub in the process: entries are content-addressed.
SHARED_CACHE = ChunkListCache()


def _mismatch(where: str, chunk_map: ChunkMap, actual: str) -> HubError:
    return HubError(
        ErrorCode.MANIFEST_INVALID,
        f"{where}: file {chunk_map.file} declares digest {chunk_map.digest}, but its chunks produce "
        f"{actual}: the layer could never be pulled",
        {"file": chunk_map.file, "digest": chunk_map.digest, "actual": actual},
    )


def _apply(parent: ChunkList | None, chunk_map: ChunkMap, where: str) -> ChunkList:
    try:
        return apply_map(parent, ((e.index, e.digest) for e in chunk_map.entries), chunk_map.size, chunk_map.chunk_size)
    except (ValueError, IndexError, ManifestError) as e:
        raise HubError(
            ErrorCode.MANIFEST_INVALID,
            f"{where}: the chunk map of {chunk_map.file} does not apply to its parent's file: {e}",
            {"file": chunk_map.file},
        ) from None


def chunk_lists(parent: dict[str, ChunkList], maps: Iterable[ChunkMap], where: str) -> dict[str, ChunkList]:
    """Each map's file list from the parent's lists, checked against the map's declared digest. O(chunks).

    Raises: HubError(MANIFEST_INVALID) naming the file whose digest does not hold.
    """
    out: dict[str, ChunkList] = {}
    for chunk_map in maps:
        chunk_list = _apply(parent.get(chunk_map.file), chunk_map, where)
        actual = chunk_list.digest()
        if actual != chunk_map.digest:
            raise _mismatch(where, chunk_map, actual)
        out[chunk_map.file] = chunk_list
    return out


async def maps_of(ctx: RegistryContext, session: AsyncSession, manifest: str) -> list[ChunkMap]:
    """The chunk maps of a stored layer, read and parsed (each ≤ ``limits.chunk_map_bytes``).

    Raises: HubError(MANIFEST_INVALID) for an unreadable map, HubError(MANIFEST_BLOB_UNKNOWN).
    """
    rows = await session.exec(
        select(ManifestBlob.blob_digest)
        .where(ManifestBlob.manifest_digest == manifest, ManifestBlob.role == BlobRole.CHUNK_MAP)
        .order_by(col(ManifestBlob.blob_digest))
    )
    maps = []
    limit = ctx.limits.chunk_map_bytes
    for digest in rows.all():
        raw = await read_blob_bytes(ctx, digest, limit, "chunk map")
        try:
            maps.append(await anyio.to_thread.run_sync(partial(ChunkMap.from_json, raw, limit=limit)))
        except ManifestError as e:
            raise HubError(
                ErrorCode.MANIFEST_INVALID,
                f"stored chunk map {digest} of layer {manifest} is unreadable: {e}",
                {"digest": digest},
            ) from None
    return maps


async def _parent_lists(
    ctx: RegistryContext, session: AsyncSession, ancestors: list[str], wanted: dict[str, str], cache: ChunkListCache
) -> dict[str, ChunkList]:
    """The parent's chunk list of each file in ``wanted`` (role → the parent's file digest)."""
    found = {role: cache.get(digest) for role, digest in wanted.items()}
    if all(v is not None for v in found.values()):
        return {role: v for role, v in found.items() if v is not None}
    lists: dict[str, ChunkList] = {}
    for link in ancestors:  # base first: rebuild every file's list the way pulls do
        maps = await maps_of(ctx, session, link)
        lists = await anyio.to_thread.run_sync(chunk_lists, lists, maps, f"layer {link} (an ancestor)")
        for chunk_list in lists.values():
            cache.put(chunk_list.digest(), chunk_list)
    return lists


async def prove_file_digests(
    ctx: RegistryContext,
    session: AsyncSession,
    maps: list[ChunkMap],
    ancestors: list[str],
    *,
    cache: ChunkListCache = SHARED_CACHE,
) -> None:
    """Prove every chunked file digest a format-v2 layer declares (``ancestors``: its chain, base → parent).

    Call after each map was checked against the parent's config (so ``parentDigest`` names the
    parent's file). Raises: HubError(MANIFEST_INVALID) naming the file, HubError(MANIFEST_BLOB_UNKNOWN).
    """
    wanted = {m.file: m.parent_digest for m in maps if m.parent_digest is not None}
    parent = await _parent_lists(ctx, session, ancestors, wanted, cache) if wanted else {}
    lists = await anyio.to_thread.run_sync(chunk_lists, parent, maps, "layer")
    for chunk_list in lists.values():
        cache.put(chunk_list.digest(), chunk_list)
