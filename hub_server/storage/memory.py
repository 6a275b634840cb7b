"""``MemoryStore``: the whole contract in a dict, for tests and as a null service.

It is deliberately as strict as the filesystem (it enforces the key tree) and stricter
about appends (appended bytes stay invisible until commit), so code tested against it
holds up on real backends. Every read and write yields to the event loop once, so
concurrency bugs in callers surface here too.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from anyio.lowlevel import checkpoint

from .base import BlobInfo, BlobStore, BlobStream, BlobWriter, Capabilities, checked_range
from .errors import BlobNotFound, InvalidKey, WriterClosed
from .keys import is_under

__all__ = ["MemoryStore"]


@dataclass(frozen=True, slots=True)
class _Object:
    data: bytes
    modified: datetime


class MemoryStore(BlobStore):
    """A dict-backed blob store. Everything is lost on ``close`` or when the process exits."""

    name = "memory"
    capabilities = Capabilities(
        supports_redirect=False,
        atomic_move=True,
        supports_append=True,
        append_isolated=True,
        enforces_key_tree=True,
    )

    def __init__(self) -> None:
        super().__init__()
        self._objects: dict[str, _Object] = {}
        # How many keys live below each implied directory: enforces the key tree in O(depth).
        self._children: Counter[str] = Counter()
        # Open writers and when they last wrote (monotonic); weak so abandoned writers vanish.
        self._staged: weakref.WeakKeyDictionary[_MemoryWriter, float] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"MemoryStore(objects={len(self._objects)})"

    async def _stat(self, key: str) -> BlobInfo:
        obj = self._get(key)
        return BlobInfo(key, len(obj.data), obj.modified)

    async def _exists(self, key: str) -> bool:
        return key in self._objects

    async def _open(self, key: str, offset: int, length: int | None, chunk_size: int) -> BlobStream:
        data = self._get(key).data
        return _MemoryStream(key, offset, checked_range(key, len(data), offset, length), chunk_size, data)

    async def _writer(self, key: str, append: bool) -> BlobWriter:
        existing = self._get(key).data if append else b""
        writer = _MemoryWriter(self, key, existing, append=append)
        if not append:  # append writers stage nothing apart, as on the filesystem
            self._staged[writer] = time.monotonic()
        return writer

    async def _delete(self, key: str) -> None:
        self._get(key)
        self._remove(key)

    async def _move(self, src: str, dst: str) -> None:
        obj = self._get(src)
        self._check_tree(dst)
        self._remove(src)
        self._insert(dst, obj)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        for key in sorted(key for key in self._objects if is_under(key, prefix)):
            yield key

    async def _usage(self) -> int:
        return sum(len(obj.data) for obj in self._objects.values())

    async def _purge_staging(self, older_than: timedelta) -> int:
        now = time.monotonic()
        stale = [w for w, started in self._staged.items() if now - started >= older_than.total_seconds()]
        for writer in stale:
            writer._purge()
        return len(stale)

    async def _close(self) -> None:
        for writer in list(self._staged.keys()):
            writer._purge()
        self._objects.clear()
        self._children.clear()

    # -- internals used by the writer --------------------------------------------------

    def _get(self, key: str) -> _Object:
        try:
            return self._objects[key]
        except KeyError:
            raise BlobNotFound(key) from None

    def _publish(self, key: str, data: bytes) -> BlobInfo:
        self._check_tree(key)
        obj = _Object(data, datetime.now(UTC))
        self._insert(key, obj)
        return BlobInfo(key, len(data), obj.modified)

    def _check_tree(self, key: str) -> None:
        if self._children[key]:
            raise InvalidKey(key, "it is already the parent of other keys")
        for parent in _parents(key):
            if parent in self._objects:
                raise InvalidKey(key, f"its parent {parent!r} is an object")

    def _insert(self, key: str, obj: _Object) -> None:
        if key not in self._objects:
            for parent in _parents(key):
                self._children[parent] += 1
        self._objects[key] = obj

    def _remove(self, key: str) -> None:
        del self._objects[key]
        for parent in _parents(key):
            self._children[parent] -= 1
            if not self._children[parent]:
                del self._children[parent]


def _parents(key: str) -> list[str]:
    """``a/b/c`` → ``["a", "a/b"]``."""
    segments = key.split("/")
    return ["/".join(segments[:i]) for i in range(1, len(segments))]


class _MemoryStream(BlobStream):
    def __init__(self, key: str, offset: int, length: int, chunk_size: int, data: bytes) -> None:
        super().__init__(key, offset, length, chunk_size)
        self._data = data  # the version that existed at open(); replacing the key won't touch it

    async def _read_at(self, position: int, size: int) -> bytes:
        await checkpoint()
        return self._data[position : position + size]


class _MemoryWriter(BlobWriter):
    def __init__(self, store: MemoryStore, key: str, existing: bytes, *, append: bool) -> None:
        super().__init__(key, append=append, size=len(existing))
        self._store = store
        self._existing = existing
        self._parts: list[bytes] = []

    async def _write(self, data: bytes | bytearray | memoryview) -> None:
        await checkpoint()
        if self.closed:  # purged while we yielded
            raise self._closed_error()
        self._parts.append(bytes(data))
        if not self.append:
            self._store._staged[self] = time.monotonic()  # purge_staging measures idleness

    async def _commit(self) -> BlobInfo:
        await checkpoint()
        if self.closed:
            raise self._closed_error()
        info = self._store._publish(self.key, self._existing + b"".join(self._parts))
        self._discard()
        return info

    async def _cancel(self) -> None:
        self._discard()

    def _purge(self) -> None:
        self._fail("its staged data was purged")
        self._discard()

    def _discard(self) -> None:
        self._parts.clear()
        self._store._staged.pop(self, None)

    def _closed_error(self) -> WriterClosed:
        return WriterClosed(f"cannot write {self.key!r}: its staged data was purged")
