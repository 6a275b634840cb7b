"""``BlobStoreConformance``: the one test suite every blob store backend passes.

A backend's test module subclasses it and provides the ``store`` fixture::

    class TestMyStore(BlobStoreConformance):
        @pytest.fixture
        async def store(self):
            store = MyStore(...)
            yield store
            await store.close()

Override ``staged_count`` too if the backend can count its staged writes; the staging
checks are skipped otherwise. Tests run on asyncio through anyio's pytest plugin.
Behaviour that differs by backend is keyed on ``store.capabilities``, never on the class.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from .base import BlobStore
from .errors import BlobNotFound, InvalidKey, InvalidRange, StorageUnavailable, WriterClosed

__all__ = ["BlobStoreConformance"]

TEN = b"0123456789"
INVALID_KEYS: list[Any] = [
    "", "/a", "a/", "a//b", ".", "a/./b", "a/..", "..", "a\\b", "a\x00b", "a\nb", "tab\there",
    "x" * 1025, "é" * 513, ("x" * 256) + "/y", "_staging/x", "_private", 42, None,
]  # fmt: skip


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in stream]


class BlobStoreConformance:
    """Subclass as ``Test<Backend>`` and override the ``store`` fixture (and ``staged_count``)."""

    pytestmark = pytest.mark.anyio

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def store(self) -> AsyncIterator[BlobStore]:
        raise NotImplementedError("override the `store` fixture in the backend's test class")
        return  # pragma: no cover

    async def staged_count(self, store: BlobStore) -> int | None:
        """How many staged (uncommitted) writes the backend holds, or ``None`` if unknown."""
        return None

    async def assert_nothing_staged(self, store: BlobStore) -> None:
        count = await self.staged_count(store)
        assert count in (None, 0), f"{count} staged write(s) left behind"

    # -- reading -------------------------------------------------------------------------

    async def test_put_then_stat_and_read(self, store: BlobStore) -> None:
        info = await store.put("a/b/c", TEN)
        stat = await store.stat("a/b/c")
        assert (info.key, info.size) == (stat.key, stat.size) == ("a/b/c", 10)
        assert stat.modified.tzinfo is not None
        assert await store.read("a/b/c") == TEN
        assert await store.exists("a/b/c") and not await store.exists("a/b")

    async def test_missing_key_raises_blob_not_found(self, store: BlobStore) -> None:
        for attempt in (store.stat("nope"), store.read("nope"), store.delete("nope"), store.open("no/pe")):
            with pytest.raises(BlobNotFound) as caught:
                await attempt
            assert isinstance(caught.value, FileNotFoundError)
        assert not await store.exists("nope")
        await store.put("a/file", b"x")  # a directory-ish key, or a key below an object, is not an object
        for key in ("a", "a/file/below"):
            with pytest.raises(BlobNotFound):
                await store.stat(key)

    async def test_zero_length_object(self, store: BlobStore) -> None:
        await store.put("empty", b"")
        assert (await store.stat("empty")).size == 0
        assert await store.read("empty") == b""
        assert await collect(await store.open("empty")) == []
        assert await collect(store.list()) == ["empty"]

    @pytest.mark.parametrize(
        ("offset", "length", "expected"),
        [
            (0, None, TEN),
            (3, None, TEN[3:]),
            (3, 4, TEN[3:7]),
            (9, 1, b"9"),
            (10, None, b""),
            (10, 0, b""),
            (0, 0, b""),
        ],
    )
    async def test_read_range(self, store: BlobStore, offset: int, length: int | None, expected: bytes) -> None:
        await store.put("r", TEN)
        assert await store.read("r", offset, length) == expected
        async with store.open("r", offset, length) as stream:
            assert stream.length == len(expected)
            assert b"".join(await collect(stream)) == expected

    @pytest.mark.parametrize(("offset", "length"), [(11, None), (-1, None), (0, -1), (5, 6), (10, 1)])
    async def test_invalid_range(self, store: BlobStore, offset: int, length: int | None) -> None:
        await store.put("r", TEN)
        with pytest.raises(InvalidRange) as caught:
            await store.read("r", offset, length)
        assert isinstance(caught.value, ValueError)

    async def test_open_streams_in_chunks(self, store: BlobStore) -> None:
        await store.put("c", TEN)
        stream = await store.open("c", 1, chunk_size=3)
        assert await collect(stream) == [b"123", b"456", b"789"]
        assert await collect(stream) == []  # exhausted streams stay empty
        with pytest.raises(ValueError, match="chunk_size must be positive"):
            await store.open("c", chunk_size=0)

    async def test_stream_reads_the_version_it_opened(self, store: BlobStore) -> None:
        await store.put("v", b"old!" * 4)
        async with store.open("v", chunk_size=4) as stream:
            first = await anext(stream)
            await store.put("v", b"NEW?" * 4)
            rest = await collect(stream)
        assert first + b"".join(rest) == b"old!" * 4
        async with store.open("v", chunk_size=4) as stream:
            await anext(stream)
            await store.delete("v")
            assert b"".join(await collect(stream)) == b"NEW?" * 3

    async def test_read_ranges(self, store: BlobStore) -> None:
        await store.put("rr", TEN)
        ranges = [(7, 3), (0, 2), (5, 0), (0, 2), (10, 0)]
        got = await collect(store.read_ranges("rr", ranges))
        assert sorted(index for index, _ in got) == [0, 1, 2, 3, 4]
        assert dict(got) == {0: b"789", 1: b"01", 2: b"", 3: b"01", 4: b""}

    async def test_read_ranges_checks_every_range_first(self, store: BlobStore) -> None:
        await store.put("rr", TEN)
        ranges_iter = store.read_ranges("rr", [(0, 1), (9, 2)])
        with pytest.raises(InvalidRange):
            await anext(ranges_iter)  # fails before yielding the valid first range
        with pytest.raises(BlobNotFound):
            await collect(store.read_ranges("missing", [(0, 1)]))

    # -- writing -------------------------------------------------------------------------

    async def test_writer_publishes_exactly_what_was_written_on_commit(self, store: BlobStore) -> None:
        async with store.writer("w/k") as writer:
            for piece in (b"ab", bytearray(b"cd"), memoryview(b"--ef--")[2:4], b""):
                await writer.write(piece)
            assert writer.size == 6
            assert not await store.exists("w/k")  # staged bytes are invisible
            assert await collect(store.list()) == []
            info = await writer.commit()
        assert (info.key, info.size) == ("w/k", 6)
        assert await store.read("w/k") == b"abcdef"
        await self.assert_nothing_staged(store)

    async def test_commit_replaces_an_existing_key_atomically(self, store: BlobStore) -> None:
        await store.put("k", b"old")
        async with store.writer("k") as writer:
            await writer.write(b"new-")
            assert await store.read("k") == b"old"
            await writer.write(b"content")
            assert await store.read("k") == b"old"
            await writer.commit()
        assert await store.read("k") == b"new-content"
        assert await collect(store.list()) == ["k"]

    async def test_reader_never_sees_partial_data(self, store: BlobStore) -> None:
        old, new = b"o" * 300_000, bytes(range(256)) * 1200
        await store.put("hot", old)
        seen: set[bytes] = set()
        done = anyio.Event()

        async def keep_reading() -> None:
            while not done.is_set():
                seen.add(await store.read("hot"))

        async def write_in_pieces() -> None:
            async with store.writer("hot") as writer:
                for start in range(0, len(new), 50_000):
                    await writer.write(new[start : start + 50_000])
                    await anyio.lowlevel.checkpoint()
                await writer.commit()
            seen.add(await store.read("hot"))
            done.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(keep_reading)
            tasks.start_soon(write_in_pieces)
        assert seen <= {old, new} and new in seen

    async def test_cancel_leaves_nothing_behind(self, store: BlobStore) -> None:
        writer = await store.writer("gone/k")
        await writer.write(b"data")
        await writer.cancel()
        await writer.cancel()  # idempotent
        assert await collect(store.list()) == []
        assert await store.usage() == 0
        await self.assert_nothing_staged(store)

    async def test_context_manager_cancels_on_exception_or_without_commit(self, store: BlobStore) -> None:
        with pytest.raises(RuntimeError):  # noqa: PT012 - the error must rise inside the writer's context
            async with store.writer("x") as writer:
                await writer.write(b"data")
                raise RuntimeError("client went away")
        async with store.writer("y") as writer:
            await writer.write(b"data")
        assert writer.closed
        assert await collect(store.list()) == []
        await self.assert_nothing_staged(store)

    async def test_cancelled_task_leaves_nothing_behind(self, store: BlobStore) -> None:
        started = anyio.Event()

        async def upload() -> None:
            async with store.writer("c/k") as writer:
                await writer.write(b"x" * 700_000)
                started.set()
                await anyio.sleep_forever()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(upload)
            await started.wait()
            tasks.cancel_scope.cancel()  # cleanup must still run inside the cancelled scope
        assert await collect(store.list()) == []
        await self.assert_nothing_staged(store)

    async def test_finished_writer_refuses_further_use(self, store: BlobStore) -> None:
        committed = await store.writer("c")
        await committed.commit()
        for late in (committed.write(b"x"), committed.commit(), committed.cancel()):
            with pytest.raises(WriterClosed):
                await late
        cancelled = await store.writer("d")
        await cancelled.cancel()
        for late in (cancelled.write(b"x"), cancelled.commit()):
            with pytest.raises(WriterClosed):
                await late
        assert await collect(store.list()) == ["c"]

    async def test_last_commit_wins_for_two_writers_on_one_key(self, store: BlobStore) -> None:
        first, second = await store.writer("k"), await store.writer("k")
        await first.write(b"first")
        await second.write(b"second")
        await first.commit()
        assert await store.read("k") == b"first"
        await second.commit()
        assert await store.read("k") == b"second"
        await self.assert_nothing_staged(store)

    async def test_append_across_writer_sessions(self, store: BlobStore) -> None:
        if not store.capabilities.supports_append:
            pytest.skip("backend cannot append")
        await store.put("uploads/u1", b"")
        expected = b""
        for piece in (b"abc", b"", b"defgh", b"i" * 70_000):
            async with store.writer("uploads/u1", append=True) as writer:
                assert writer.size == len(expected)
                await writer.write(piece)
                await writer.commit()
            expected += piece
            assert await store.read("uploads/u1") == expected
        assert (await store.stat("uploads/u1")).size == len(expected)

    async def test_append_cancel_restores_previous_content(self, store: BlobStore) -> None:
        if not store.capabilities.supports_append:
            pytest.skip("backend cannot append")
        await store.put("u", b"kept")
        with pytest.raises(RuntimeError):  # noqa: PT012 - the error must rise inside the writer's context
            async with store.writer("u", append=True) as writer:
                await writer.write(b"x" * 600_000)  # big enough to reach disk on buffered backends
                raise RuntimeError("request aborted")
        assert await store.read("u") == b"kept"

    async def test_append_never_changes_existing_bytes(self, store: BlobStore) -> None:
        if not store.capabilities.supports_append:
            pytest.skip("backend cannot append")
        await store.put("u", b"prefix")
        async with store.writer("u", append=True) as writer:
            await writer.write(b"y" * 600_000)
            during = await store.read("u")
            if store.capabilities.append_isolated:
                assert during == b"prefix"
            assert during[:6] == b"prefix"
            await writer.commit()
        assert await store.read("u") == b"prefix" + b"y" * 600_000

    async def test_append_to_missing_key_raises_blob_not_found(self, store: BlobStore) -> None:
        if not store.capabilities.supports_append:
            pytest.skip("backend cannot append")
        with pytest.raises(BlobNotFound):
            await store.writer("uploads/unknown", append=True)

    async def test_large_object_streamed_in_odd_pieces(self, store: BlobStore) -> None:
        data = os.urandom(8 * 1024 * 1024 + 13)
        sizes = itertools.cycle([1, 4097, 65_537, 1_000_003, 333])
        async with store.writer("big") as writer:
            position = 0
            while position < len(data):
                piece = data[position : position + next(sizes)]
                await writer.write(piece)
                position += len(piece)
            assert (await writer.commit()).size == len(data)
        digest = hashlib.sha256()
        async with store.open("big", chunk_size=777_777) as stream:
            async for chunk in stream:
                assert 0 < len(chunk) <= 777_777
                digest.update(chunk)
        assert digest.digest() == hashlib.sha256(data).digest()
        assert await store.read("big", 5_000_000, 4099) == data[5_000_000:5_004_099]

    async def test_concurrent_writers_to_different_keys(self, store: BlobStore) -> None:
        async def write(index: int) -> None:
            async with store.writer(f"con/{index:02d}") as writer:
                for _ in range(5):
                    await writer.write(bytes([index]) * 1000)
                    await anyio.lowlevel.checkpoint()
                await writer.commit()

        async with anyio.create_task_group() as tasks:
            for index in range(16):
                tasks.start_soon(write, index)
        assert await collect(store.list("con")) == [f"con/{i:02d}" for i in range(16)]
        for index in range(16):
            assert await store.read(f"con/{index:02d}") == bytes([index]) * 5000
        await self.assert_nothing_staged(store)

    # -- keys and listing ----------------------------------------------------------------

    async def test_list_is_recursive_and_sorted_like_strings(self, store: BlobStore) -> None:
        keys = ["a/b", "a-c", "a.b", "a0", "a/b2/c", "b", "a/a/a/a", "Z", "a/b-/x", "a/b.", "é/1"]
        keys += [f"many/{i}" for i in range(60)]
        for key in reversed(keys):
            await store.put(key, key.encode())
        assert await collect(store.list()) == sorted(keys)
        assert await collect(store.list("many")) == sorted(k for k in keys if k.startswith("many/"))

    async def test_list_prefix_matches_whole_segments(self, store: BlobStore) -> None:
        for key in ("a/b/c", "a/b/d/e", "a/bc", "a/b-x", "ab"):
            await store.put(key, b"")
        assert await collect(store.list("a/b")) == ["a/b/c", "a/b/d/e"]
        assert await collect(store.list("a/b/")) == ["a/b/c", "a/b/d/e"]
        assert await collect(store.list("a/bc")) == ["a/bc"]  # a prefix that is itself a key
        assert await collect(store.list("a/nothing")) == []
        assert await collect(store.list("a")) == ["a/b-x", "a/b/c", "a/b/d/e", "a/bc"]

    @pytest.mark.parametrize("key", INVALID_KEYS, ids=repr)
    async def test_invalid_keys_are_rejected_everywhere(self, store: BlobStore, key: Any) -> None:
        attempts: list[Awaitable[Any]] = [
            store.stat(key), store.exists(key), store.read(key), store.put(key, b"x"), store.delete(key),
            store.writer(key), store.move(key, "ok"), store.move("ok", key), store.redirect_url(key, expires_in=60),
        ]  # fmt: skip
        await store.put("ok", b"x")
        for attempt in attempts:
            with pytest.raises(InvalidKey):
                await attempt
        assert await collect(store.list()) == ["ok"]
        await self.assert_nothing_staged(store)

    @pytest.mark.parametrize("prefix", ["/", "/a", "a//b", "../a", "a\\b"])
    async def test_invalid_prefixes_are_rejected(self, store: BlobStore, prefix: str) -> None:
        with pytest.raises(InvalidKey):
            await collect(store.list(prefix))

    async def test_key_tree_conflicts(self, store: BlobStore) -> None:
        if not store.capabilities.enforces_key_tree:
            pytest.skip("backend lets a key also be a parent")
        await store.put("t/leaf", b"leaf")
        for key in ("t/leaf/below", "t"):
            with pytest.raises(InvalidKey):
                await store.put(key, b"x")
        await store.put("src", b"s")
        with pytest.raises(InvalidKey):
            await store.move("src", "t/leaf/below")
        assert await collect(store.list()) == ["src", "t/leaf"]
        assert await store.read("src") == b"s"
        await self.assert_nothing_staged(store)

    # -- delete, move --------------------------------------------------------------------

    async def test_delete_removes_only_that_key(self, store: BlobStore) -> None:
        for key in ("d/a/b", "d/a/bc", "d/a/b2/c"):
            await store.put(key, b"x")
        await store.delete("d/a/b")
        with pytest.raises(BlobNotFound):
            await store.delete("d/a/b")
        assert await collect(store.list()) == ["d/a/b2/c", "d/a/bc"]
        await store.delete("d/a/b2/c")
        await store.put("d/a/b2", b"a key where a directory was")
        assert await store.read("d/a/b2") == b"a key where a directory was"

    async def test_delete_prefix(self, store: BlobStore) -> None:
        for key in ("p/a", "p/b/c", "p/b/d", "pq", "p2/a"):
            await store.put(key, b"x")
        assert await store.delete_prefix("p/b") == 2
        assert await store.delete_prefix("p") == 1
        assert await store.delete_prefix("p") == 0
        assert await collect(store.list()) == ["p2/a", "pq"]

    async def test_move(self, store: BlobStore) -> None:
        await store.put("uploads/1", b"payload")
        await store.put("blobs/x", b"older")
        await store.move("uploads/1", "blobs/x")
        assert await store.read("blobs/x") == b"payload"
        assert await collect(store.list()) == ["blobs/x"]
        await store.move("blobs/x", "blobs/x")  # a no-op, not a delete
        assert await store.read("blobs/x") == b"payload"
        await store.move("blobs/x", "deep/er/key")
        assert await collect(store.list()) == ["deep/er/key"]
        for src in ("uploads/1", "nope"):
            with pytest.raises(BlobNotFound):
                await store.move(src, "anything")
        with pytest.raises(BlobNotFound):
            await store.move("nope", "nope")

    # -- serving, accounting, lifecycle ----------------------------------------------------

    async def test_redirect_url_follows_capability(self, store: BlobStore) -> None:
        await store.put("r", b"x")
        url = await store.redirect_url("r", expires_in=60)
        if store.capabilities.supports_redirect:
            assert isinstance(url, str) and url
        else:
            assert url is None
        with pytest.raises(ValueError, match="expires_in must be at least 1 second"):
            await store.redirect_url("r", expires_in=0)
        with pytest.raises(ValueError, match="method must be 'GET' or 'HEAD'"):
            await store.redirect_url("r", expires_in=60, method="DELETE")  # type: ignore[arg-type]

    async def test_usage_counts_committed_bytes(self, store: BlobStore) -> None:
        assert await store.usage() == 0
        await store.put("u/a", b"x" * 100)
        await store.put("u/b", b"x" * 50)
        await store.put("u/a", b"x" * 10)
        writer = await store.writer("u/c")
        await writer.write(b"x" * 1000)
        assert await store.usage() == 60
        await writer.cancel()
        await store.delete("u/b")
        assert await store.usage() == 10

    async def test_purge_staging_aborts_abandoned_writes(self, store: BlobStore) -> None:
        writer = await store.writer("p/k")
        await writer.write(b"half an upload")
        assert await store.purge_staging(timedelta(days=1)) == 0
        assert await store.purge_staging(timedelta(0)) == 1
        with pytest.raises(WriterClosed):
            await writer.commit()
        assert await collect(store.list()) == []
        await self.assert_nothing_staged(store)

    async def test_closed_store_raises_unavailable(self, store: BlobStore) -> None:
        await store.put("k", b"x")
        await store.close()
        await store.close()  # idempotent
        for attempt in (store.stat("k"), store.read("k"), store.put("k", b"y"), store.usage()):
            with pytest.raises(StorageUnavailable):
                await attempt
        with pytest.raises(StorageUnavailable):
            await collect(store.list())
