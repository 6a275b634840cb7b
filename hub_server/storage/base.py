"""The blob store contract: a dumb, async ``key -> bytes`` store.

This is the bottom layer of the hub (HTTP → registry semantics → **storage**). It knows
nothing about digests, manifests or repositories; ``hub_server/registry/core/paths.py`` decides
which keys exist. Every backend (filesystem, memory, S3 …) subclasses :class:`BlobStore` and
passes :class:`hub_server.storage.testing.BlobStoreConformance`.

Keys
    Relative ``/``-separated paths, validated by :func:`~hub_server.storage.keys.validate_key`
    (no empty, ``.`` or ``..`` segment, no leading ``/``, no ``\\``, printable, ≤ 1024 UTF-8
    bytes, first segment not starting with ``_``). A key names an *object*; directories are
    implied and never listed. Prefixes match whole segments (``a/b`` selects ``a/b/c``, not
    ``a/bc``). Where ``capabilities.enforces_key_tree`` is true a key cannot also be the
    parent of other keys (``a/b`` and ``a/b/c`` cannot coexist); such a write raises
    ``InvalidKey``.

Reading
    ``stat`` → :class:`BlobInfo`. ``open(key, offset, length)`` returns a :class:`BlobStream`
    of chunks (``chunk_size``, default 1 MiB) that reads the object version that existed when
    ``open`` returned, even if the key is replaced or deleted meanwhile. ``read`` is
    ``open`` collected into ``bytes`` for small things; ``read_ranges`` reads many
    ``(offset, length)`` ranges of one object. Ranges are strict: ``0 <= offset <= size`` and
    ``offset + length <= size``, else ``InvalidRange`` (so a read returns exactly ``length``
    bytes); ``offset == size`` reads nothing. ``length=None`` means "to the end".

Writing
    ``writer(key)`` stages bytes out of sight; ``commit()`` publishes them, ``cancel()``
    discards them. Streams of any size are written without holding them in memory (the
    filesystem writes a temp file, S3 a multipart upload). ``writer(key, append=True)``
    reopens the *committed* object at ``key`` and continues at its current size — this is how
    a resumable upload (``uploads/<id>``) grows across HTTP requests. ``put`` is a one-shot
    write, ``move`` renames a key (how a verified upload reaches its content address).

Atomicity (what a reader or a crash can observe)
    * ``writer(key).commit()``: atomic on every backend. Readers see the old object (or none)
      until commit returns, then exactly the written bytes; a replaced key never shows a mix.
      After a crash the key holds the old or the new bytes; leftovers stay in staging, out of
      every listing, until ``purge_staging`` removes them.
    * ``cancel()`` / leaving ``async with`` without committing: nothing becomes visible and
      the staged bytes are removed. A ``commit()`` that raises removes them too; the key then
      holds its old bytes (or, if only the final durability step failed, the new ones).
    * ``writer(key, append=True)`` (the key must exist: create an upload with ``put(key,
      b"")``): ``cancel()`` restores the previous size and ``commit()``
      makes the appended bytes durable. Only where ``capabilities.append_isolated`` (memory)
      are the new bytes invisible before commit; the filesystem appends in place, so readers
      may see the growing tail and a crash may keep part of it. Verify appended objects by
      digest before trusting them (the registry does, before ``move``).
    * ``move(src, dst)``: atomic where ``capabilities.atomic_move`` (filesystem, memory);
      otherwise copy-then-delete, during which both keys may exist.
    * ``delete`` and ``delete_prefix``: each single delete is atomic; a prefix is removed key by key.

Concurrency
    Writers to different keys are independent. Two fresh writers on one key: last commit wins.
    At most one append writer per key at a time (the registry serialises upload sessions);
    anything else on the same key while it is open is undefined.

Errors (``hub_server.storage.errors``)
    ``BlobNotFound`` (missing object, also ``FileNotFoundError``), ``InvalidKey`` and
    ``InvalidRange`` (also ``ValueError``), ``WriterClosed``, ``StorageFull`` (also
    ``OSError``), ``StorageUnavailable`` (unreachable or closed store), ``StorageError``
    for the rest. Nothing else escapes a backend.

Blocking backends run their I/O in worker threads; no method blocks the event loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar

from .errors import BlobNotFound, InvalidRange, StorageError, StorageUnavailable
from .keys import validate_key, validate_prefix
from .streams import BlobStream, BlobWriter

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "BlobInfo",
    "BlobStore",
    "BlobStream",
    "BlobWriter",
    "Capabilities",
    "checked_range",
]

DEFAULT_CHUNK_SIZE = 1 << 20
RedirectMethod = Literal["GET", "HEAD"]


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """What ``stat`` knows about a committed object. ``modified`` is timezone-aware (UTC)."""

    key: str
    size: int
    modified: datetime


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do, so callers branch on flags instead of catching surprises."""

    supports_redirect: bool
    """``redirect_url`` returns URLs clients can fetch directly (else it returns ``None``)."""
    atomic_move: bool
    """``move`` is a single atomic rename (else copy-then-delete)."""
    supports_append: bool
    """``writer(key, append=True)`` works."""
    append_isolated: bool
    """Appended bytes stay invisible to readers until ``commit``."""
    enforces_key_tree: bool
    """A key cannot also be a parent of other keys; conflicting writes raise ``InvalidKey``."""


def checked_range(key: str, size: int, offset: int, length: int | None) -> int:
    """Return the number of bytes ``(offset, length)`` selects in a ``size``-byte object.

    Raises:
        InvalidRange: if ``offset`` or ``length`` is negative or the range ends past ``size``.
    """
    if offset < 0 or offset > size or (length is not None and (length < 0 or offset + length > size)):
        raise InvalidRange(key, offset, length, size)
    return size - offset if length is None else length


_T = TypeVar("_T", BlobStream, BlobWriter)


class _Opening(Generic[_T]):
    """Lets ``store.writer(k)`` / ``store.open(k)`` be awaited *or* used in ``async with``."""

    def __init__(self, factory: Callable[[], Awaitable[_T]]) -> None:
        self._factory: Callable[[], Awaitable[_T]] = factory
        self._opened: _T | None = None

    def __await__(self) -> Generator[Any, None, _T]:
        return self._factory().__await__()

    async def __aenter__(self) -> _T:
        self._opened = await self._factory()
        return await self._opened.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._opened is not None
        await self._opened.__aexit__(exc_type, exc, tb)


class BlobStore(ABC):
    """Abstract blob store; see the module docstring for the full contract.

    Public methods validate keys, ranges and the open/closed state, then call the
    ``_``-prefixed hooks that a backend implements (keys reaching a hook are valid).
    """

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def __init__(self) -> None:
        self._closed = False

    # -- reading ----------------------------------------------------------------------

    async def stat(self, key: str) -> BlobInfo:
        """Size and modification time of the object at ``key``.

        Raises: InvalidKey, BlobNotFound, StorageUnavailable, StorageError.
        """
        self._check_open()
        return await self._stat(validate_key(key))

    async def exists(self, key: str) -> bool:
        """Whether an object is committed at ``key``. Raises: InvalidKey, StorageUnavailable."""
        self._check_open()
        return await self._exists(validate_key(key))

    def open(
        self, key: str, offset: int = 0, length: int | None = None, *, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> _Opening[BlobStream]:
        """Stream ``length`` bytes (default: to the end) of ``key`` from ``offset``.

        Await it (``stream = await store.open(k)``) or enter it (``async with store.open(k)
        as stream``); close the stream or exhaust it. ``stream.length`` is known up front.

        Raises: InvalidKey, BlobNotFound, InvalidRange, ValueError (chunk_size < 1),
        StorageUnavailable, StorageError (also while iterating).
        """

        async def opening() -> BlobStream:
            self._check_open()
            validate_key(key)
            if chunk_size < 1:
                raise ValueError(f"chunk_size must be positive, got {chunk_size}")
            if offset < 0 or (length is not None and length < 0):
                raise InvalidRange(key, offset, length, None)
            return await self._open(key, offset, length, chunk_size)

        return _Opening(opening)

    async def read(self, key: str, offset: int = 0, length: int | None = None) -> bytes:
        """The bytes ``open`` would stream, collected; for small objects and ranges.

        Raises: InvalidKey, BlobNotFound, InvalidRange, StorageUnavailable, StorageError.
        """
        async with self.open(key, offset, length) as stream:
            return b"".join([chunk async for chunk in stream])

    async def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> AsyncIterator[tuple[int, bytes]]:
        """Yield ``(index, data)`` for every ``(offset, length)`` in ``ranges``, each exactly once.

        Backends may yield in any order (the default reads in order). Every range is
        checked against the object's size before the first item is yielded.

        Raises: InvalidKey, BlobNotFound, InvalidRange, StorageUnavailable, StorageError.
        """
        info = await self.stat(key)
        for offset, length in ranges:
            checked_range(key, info.size, offset, length)
        for index, (offset, length) in enumerate(ranges):
            yield index, await self.read(key, offset, length)

    # -- writing ----------------------------------------------------------------------

    def writer(self, key: str, *, append: bool = False) -> _Opening[BlobWriter]:
        """A staged writer for ``key``; await it or use it in ``async with``.

        ``append=True`` continues the committed object at ``key`` (``writer.size`` starts at
        its size). Leaving ``async with`` without ``commit()`` (or with an exception) cancels.

        Raises: InvalidKey, BlobNotFound (append to a missing key), StorageError (append
        unsupported: check ``capabilities.supports_append``), StorageFull, StorageUnavailable.
        """

        async def opening() -> BlobWriter:
            self._check_open()
            validate_key(key)
            if append and not self.capabilities.supports_append:
                raise StorageError(f"the {self.name} backend cannot append (writing {key!r})")
            return await self._writer(key, append)

        return _Opening(opening)

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> BlobInfo:
        """Write ``data`` to ``key`` atomically (replacing it). Same errors as ``writer``."""
        async with self.writer(key) as writer:
            await writer.write(data)
            return await writer.commit()

    async def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``, replacing ``dst``; atomic if ``capabilities.atomic_move``.

        Raises: InvalidKey (either key, or ``dst`` conflicts with the key tree), BlobNotFound
        (``src``), StorageFull, StorageUnavailable, StorageError.
        """
        self._check_open()
        validate_key(src)
        validate_key(dst)
        if src != dst:
            await self._move(src, dst)
        elif not await self._exists(src):
            raise BlobNotFound(src)

    async def delete(self, key: str) -> None:
        """Remove the object at ``key``. Raises: InvalidKey, BlobNotFound, StorageUnavailable."""
        self._check_open()
        await self._delete(validate_key(key))

    async def delete_prefix(self, prefix: str) -> int:
        """Remove every key ``list(prefix)`` yields; return how many. ``""`` empties the store.

        Raises: InvalidKey, StorageUnavailable, StorageError.
        """
        count = 0
        async for key in self.list(prefix):
            try:
                await self._delete(key)
            except BlobNotFound:
                continue  # deleted concurrently: the goal is reached either way
            count += 1
        return count

    async def list(self, prefix: str = "") -> AsyncIterator[str]:
        """Yield every committed key under ``prefix`` (recursively), in lexicographic order.

        Staged writes are never listed. Raises: InvalidKey, StorageUnavailable, StorageError.
        """
        self._check_open()
        normalised = validate_prefix(prefix)
        async for key in self._list(normalised):
            yield key

    # -- serving, accounting, lifecycle -----------------------------------------------

    async def redirect_url(self, key: str, *, expires_in: int, method: RedirectMethod = "GET") -> str | None:
        """A URL that serves ``key`` directly for ``expires_in`` seconds, or ``None``.

        ``None`` means the backend cannot serve bytes itself (``supports_redirect`` is false)
        and the hub must stream them. Existence is not checked.

        Raises: InvalidKey, ValueError (``expires_in`` < 1 or an unknown method).
        """
        self._check_open()
        validate_key(key)
        if expires_in < 1:
            raise ValueError(f"expires_in must be at least 1 second, got {expires_in}")
        if method not in ("GET", "HEAD"):
            raise ValueError(f"method must be 'GET' or 'HEAD', got {method!r}")
        return await self._redirect_url(key, expires_in, method)

    async def usage(self) -> int:
        """Total size in bytes of all committed objects (staging excluded), for metrics.

        Raises: StorageUnavailable, StorageError.
        """
        self._check_open()
        return await self._usage()

    async def free_bytes(self) -> int | None:
        """Bytes the store can still take, or ``None`` when it cannot tell (object stores).

        ``/healthz`` reports a store under its threshold as full. Raises: StorageUnavailable.
        """
        self._check_open()
        return await self._free_bytes()

    async def purge_staging(self, older_than: timedelta) -> int:
        """Abort staged writes not written to for ``older_than``; return how many.

        Crash leftovers and abandoned uploads are removed this way; a live writer that was
        purged raises ``WriterClosed`` on commit. Append writers stage nothing apart, so
        they are not affected. Raises: StorageUnavailable, StorageError.
        """
        self._check_open()
        return await self._purge_staging(older_than)

    async def close(self) -> None:
        """Release resources. Idempotent; afterwards every method raises ``StorageUnavailable``."""
        if not self._closed:
            self._closed = True
            await self._close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailable(f"{self!r} is closed")

    # -- backend hooks (keys and prefixes are already validated) -----------------------

    @abstractmethod
    async def _stat(self, key: str) -> BlobInfo: ...

    @abstractmethod
    async def _open(self, key: str, offset: int, length: int | None, chunk_size: int) -> BlobStream:
        """Open one object version; call ``checked_range`` against its size."""

    @abstractmethod
    async def _writer(self, key: str, append: bool) -> BlobWriter: ...

    @abstractmethod
    async def _delete(self, key: str) -> None: ...

    @abstractmethod
    def _list(self, prefix: str) -> AsyncIterator[str]:
        """Yield keys selected by the normalised ``prefix`` (see ``keys.is_under``), sorted."""

    async def _exists(self, key: str) -> bool:
        try:
            await self._stat(key)
        except BlobNotFound:
            return False
        return True

    async def _move(self, src: str, dst: str) -> None:
        """Fallback for backends without a rename: copy through a writer, then delete."""
        async with self.open(src) as stream, self.writer(dst) as writer:
            async for chunk in stream:
                await writer.write(chunk)
            await writer.commit()
        await self._delete(src)

    async def _redirect_url(self, key: str, expires_in: int, method: RedirectMethod) -> str | None:
        return None

    async def _usage(self) -> int:
        return sum([(await self._stat(key)).size async for key in self._list("")])

    async def _purge_staging(self, older_than: timedelta) -> int:
        return 0

    async def _free_bytes(self) -> int | None:
        return None

    async def _close(self) -> None:
        return None
