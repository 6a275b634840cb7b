"""Verified objects in the mirror's blob store, by digest: single-flight fills, pinned reads, LRU eviction.

Store keys: ``mirror/sha256/<first two hex>/<hex>`` (one object per digest, shared by every repository; which
repository may read it is the index's ``links`` and the access checks' business, never this module's).

Filling (``fill``): the bytes stream into a staged writer of the store while they are hashed; only when their
sha256 and size match the digest is the writer committed (the store's commit is atomic: nothing unverified is
ever visible under the key) and then the index row written. A mismatch cancels the writer (nothing is stored)
and raises ``MirrorError`` 502 ``DIGEST_INVALID``. Concurrent fills of one key share one run
(``single_flight``): one upstream fetch, every waiter gets its result or its error; a waiter that goes away does
not cancel the run for the others.

Eviction: with a size limit, a fill first deletes least-recently-used objects until the new one fits, skipping
pinned ones (being read or filled) and those looked up in the last ``IN_USE`` seconds. When those alone exceed
the limit, the new object is stored anyway (the cache is over its limit until they are idle); an object larger
than the limit is stored too, and is the first to go.

Errors: ``MirrorError`` (502 on a digest mismatch, 400 for a digest that is not ``sha256:<64 hex>``),
``BlobNotFound`` from ``open`` when the bytes vanished (the row is dropped: the next read fetches again),
the store's ``StorageError`` family.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from hub_server.errors import ErrorCode
from hub_server.mirror.errors import MirrorError
from hub_server.mirror.index import CachedObject, MirrorIndex
from hub_server.mirror.metrics import MirrorMetrics
from hub_server.storage import BlobNotFound, BlobStore

__all__ = ["ObjectCache", "SingleFlight", "check_digest", "object_key"]

log = logging.getLogger(__name__)

#: Seconds between two writes of one object's ``last_used``.
TOUCH_EVERY = 30.0
#: Seconds after a lookup during which eviction leaves the object alone (its answer may not have started yet).
IN_USE = 10.0

_T = TypeVar("_T")
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")


def check_digest(digest: str) -> str:
    """``digest`` if it is ``sha256:<64 lower-case hex>`` (what the hub's manifests and blobs use), else 400."""
    if not _SHA256.fullmatch(digest):
        raise MirrorError(
            ErrorCode.DIGEST_INVALID, 400, f"{digest[:100]!r} is not a sha256 digest", {"digest": digest[:100]}
        )
    return digest


def object_key(digest: str) -> str:
    hexdigest = digest.removeprefix("sha256:")
    return f"mirror/sha256/{hexdigest[:2]}/{hexdigest}"


class SingleFlight:
    """One run per key at a time; later callers for the same key await the first one's task."""

    def __init__(self) -> None:
        self._running: dict[Any, asyncio.Task[Any]] = {}

    def running(self, key: Any) -> bool:
        """Whether a run for ``key`` is under way (a caller now would join it)."""
        return key in self._running

    async def run(self, key: Any, work: Callable[[], Awaitable[_T]]) -> _T:
        task = self._running.get(key)
        if task is None:

            async def wrapped() -> _T:
                try:
                    return await work()
                finally:
                    self._running.pop(key, None)

            task = asyncio.ensure_future(wrapped())
            self._running[key] = task
        return await asyncio.shield(task)  # a caller that goes away leaves the run to the others


class ObjectCache:
    def __init__(
        self, store: BlobStore, index: MirrorIndex, metrics: MirrorMetrics, *, limit_bytes: int | None = None
    ) -> None:
        self.store = store
        self.index = index
        self.metrics = metrics
        self.limit_bytes = limit_bytes
        self.flights = SingleFlight()
        self._pins: Counter[str] = Counter()
        self._evicting = asyncio.Lock()
        self._used: dict[str, float] = {}
        """When this process last looked each object up or filled it (its bytes were there then)."""
        self.touch_every = TOUCH_EVERY
        self.in_use = IN_USE

    async def lookup(self, digest: str) -> CachedObject | None:
        """The cached object (its bytes present), its use recorded for the LRU order; ``None`` when not cached.

        The store is asked whether the bytes are there once per object and process (an operator may have deleted
        them); the index's ``last_used`` is written at most every ``TOUCH_EVERY`` seconds per object (a pull reads
        one blob in many ranges)."""
        obj = await self.index.object(digest)
        if obj is None:
            self._used.pop(digest, None)
            return None
        now = time.time()
        last = self._used.get(digest)
        if last is None and not await self.store.exists(object_key(digest)):  # deleted behind the index's back
            await self.index.forget_object(digest)
            return None
        if last is None or now - last >= self.touch_every:
            await self.index.touch(digest, now)
            self._used[digest] = now
        return obj

    async def read(self, obj: CachedObject) -> bytes:
        self._pins[obj.digest] += 1
        try:
            return await self.store.read(object_key(obj.digest))
        finally:
            self._unpin(obj.digest)

    async def open(self, obj: CachedObject, offset: int = 0, length: int | None = None) -> AsyncIterator[bytes]:
        """Stream ``length`` bytes from ``offset``; the object is pinned (never evicted) until the stream ends."""
        self._pins[obj.digest] += 1
        try:
            async with self.store.open(object_key(obj.digest), offset, length) as stream:
                async for piece in stream:
                    yield piece
        finally:
            self._unpin(obj.digest)

    def _unpin(self, digest: str) -> None:
        self._pins[digest] -= 1
        if self._pins[digest] <= 0:
            del self._pins[digest]

    async def put(self, digest: str, media_type: str, data: bytes) -> CachedObject:
        """Store small bytes already in memory (a manifest), verified against ``digest``."""

        async def one() -> AsyncIterator[bytes]:
            yield data

        return await self.fill(digest, media_type, one(), len(data))

    async def fill(
        self, digest: str, media_type: str, chunks: AsyncIterator[bytes], declared_size: int | None
    ) -> CachedObject:
        """Write ``chunks`` under ``digest`` if they hash to it (see the module docstring); the cached object."""
        check_digest(digest)
        self._pins[digest] += 1
        try:
            if declared_size is not None:
                await self._make_room(declared_size)
            hasher = hashlib.sha256()
            size = 0
            async with self.store.writer(object_key(digest)) as writer:
                async for piece in chunks:
                    hasher.update(piece)
                    size += len(piece)
                    await writer.write(piece)
                got = "sha256:" + hasher.hexdigest()
                if got != digest or (declared_size is not None and size != declared_size):
                    await writer.cancel()
                    raise MirrorError(
                        ErrorCode.DIGEST_INVALID,
                        502,
                        f"the upstream sent {size:,} bytes for {digest} that hash to {got}: refused, nothing cached",
                        {"digest": digest, "received": got, "size": size},
                    )
                await writer.commit()
            obj = CachedObject(digest, size, media_type)
            now = time.time()
            await self.index.add_object(obj, now)
            self._used[digest] = now  # about to be served
            self.metrics.cache_bytes.set(await self.index.total_bytes())
            return obj
        finally:
            self._unpin(digest)

    async def _make_room(self, size: int) -> None:
        if self.limit_bytes is None:
            return
        async with self._evicting:
            total = await self.index.total_bytes()
            if total + size <= self.limit_bytes:
                return
            now = time.time()
            for obj in await self.index.least_recent(1000):
                if total + size <= self.limit_bytes:
                    break
                if self._pins.get(obj.digest) or now - self._used.get(obj.digest, 0.0) < self.in_use:
                    continue  # being read or filled, or just looked up for an answer that is about to stream
                self._used.pop(obj.digest, None)
                await self.index.forget_object(obj.digest)  # the row first: never a row without bytes
                with contextlib.suppress(BlobNotFound):
                    await self.store.delete(object_key(obj.digest))
                total -= obj.size
                self.metrics.evictions.inc()
                log.info("evicted %s (%d bytes) to stay under the cache limit", obj.digest, obj.size)
            self.metrics.cache_bytes.set(max(total, 0))
