"""The mirror's object cache on a real store (memory) and index (SQLite): verified fills, LRU eviction by size
that spares what is being read, one run per key for concurrent callers."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from hub_server.mirror.cache import ObjectCache, object_key
from hub_server.mirror.errors import MirrorError
from hub_server.mirror.index import MirrorIndex
from hub_server.mirror.metrics import MirrorMetrics
from hub_server.storage.factory import create_store


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_cache(tmp_path: Path, limit: int | None) -> ObjectCache:
    cache = ObjectCache(create_store("memory"), MirrorIndex.open(tmp_path / "m.db"), MirrorMetrics(), limit_bytes=limit)
    cache.touch_every = 0.0  # every use recorded: the test's uses are milliseconds apart
    cache.in_use = 0.0
    return cache


def test_the_least_recently_used_goes_first_and_a_pinned_one_never(tmp_path: Path) -> None:
    a, b, c, d = (bytes([i]) * 100 for i in range(4))

    async def go() -> None:
        cache = make_cache(tmp_path, limit=250)
        for data in (a, b):
            await cache.put(digest_of(data), "x", data)
        assert await cache.lookup(digest_of(a)) is not None  # a is now more recent than b
        await cache.put(digest_of(c), "x", c)
        assert await cache.index.object(digest_of(b)) is None  # b evicted, its bytes too
        assert not await cache.store.exists(object_key(digest_of(b)))
        held = await cache.lookup(digest_of(a))
        assert held is not None
        reading = cache.open(held)
        assert await anext(reading) == a  # a is pinned while its stream is open
        await cache.put(digest_of(d), "x", d)
        assert await cache.index.object(digest_of(a)) is not None
        assert await cache.index.object(digest_of(c)) is None
        await reading.aclose()
        assert cache.metrics.value("forkd_mirror_evictions_total") == 2
        cache.index.close()

    asyncio.run(go())


def test_bytes_that_do_not_hash_to_the_digest_are_not_kept(tmp_path: Path) -> None:
    async def go() -> None:
        cache = make_cache(tmp_path, limit=None)
        with pytest.raises(MirrorError, match="hash to") as caught:
            await cache.put(digest_of(b"right"), "x", b"wrong")
        assert caught.value.status == 502
        assert await cache.index.object(digest_of(b"right")) is None
        assert [key async for key in cache.store.list()] == []
        cache.index.close()

    asyncio.run(go())


def test_concurrent_callers_of_one_key_share_one_run(tmp_path: Path) -> None:
    runs = 0

    async def work() -> int:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.05)
        return 42

    async def go() -> list[int]:
        cache = make_cache(tmp_path, limit=None)
        try:
            return await asyncio.gather(*(cache.flights.run("k", work) for _ in range(10)))
        finally:
            cache.index.close()

    assert asyncio.run(go()) == [42] * 10
    assert runs == 1
