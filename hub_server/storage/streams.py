"""The two stateful handles a blob store hands out: a read stream and a staged writer.

Both own the bookkeeping every backend needs (positions, sizes, closed/failed states,
``async with`` behaviour); backends fill in a few ``_``-prefixed hooks.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Self

import anyio

from .errors import StorageError, WriterClosed

if TYPE_CHECKING:
    from .base import BlobInfo

__all__ = ["BlobStream", "BlobWriter"]


class BlobStream(ABC):
    """Async iterator over ``length`` bytes of one object version, starting at ``offset``.

    Yields chunks of at most ``chunk_size`` bytes. Exhausting the stream, ``aclose()`` or
    leaving ``async with`` releases it; iterating a closed stream yields nothing.

    Raises while iterating: StorageError (e.g. the object shrank underneath a backend that
    cannot pin a version), StorageUnavailable.
    """

    def __init__(self, key: str, offset: int, length: int, chunk_size: int) -> None:
        self.key = key
        self.offset = offset
        self.length = length
        self._position = offset
        self._end = offset + length
        self._chunk_size = chunk_size
        self._closed = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        if self._closed or self._position >= self._end:
            await self.aclose()
            raise StopAsyncIteration
        wanted = min(self._chunk_size, self._end - self._position)
        try:
            data = await self._read_at(self._position, wanted)
            if len(data) != wanted:
                raise StorageError(
                    f"{self.key!r} changed while being read: got {len(data)} bytes at "
                    f"offset {self._position}, expected {wanted}"
                )
        except BaseException:
            with anyio.CancelScope(shield=True):  # release even when we are being cancelled
                await self.aclose()
            raise
        self._position += wanted
        return data

    async def aclose(self) -> None:
        """Release the stream. Idempotent."""
        if not self._closed:
            self._closed = True
            await self._release()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @abstractmethod
    async def _read_at(self, position: int, size: int) -> bytes:
        """Return ``size`` bytes at absolute ``position`` (fewer only if the object shrank)."""

    async def _release(self) -> None:
        return None


_State = Literal["open", "committed", "cancelled", "failed"]


class BlobWriter(ABC):
    """A staged write to ``key``: ``write``… then ``commit`` (publish) or ``cancel`` (discard).

    ``size`` is the size the object will have when committed (for an append writer it starts
    at the existing size). A failed ``write`` breaks the writer: only ``cancel`` is allowed
    after it, so an object with a hole can never be committed. A failed ``commit`` cancels.
    Used as an async context manager, it cancels on exit unless committed or cancelled.
    """

    def __init__(self, key: str, *, append: bool, size: int = 0) -> None:
        self.key = key
        self.append = append
        self._size = size
        self._state: _State = "open"
        self._why_closed = ""
        self._busy = False

    @property
    def size(self) -> int:
        """Bytes the committed object will hold (existing bytes + bytes written so far)."""
        return self._size

    @property
    def closed(self) -> bool:
        """True once committed, cancelled or broken; only ``cancel`` is allowed then."""
        return self._state != "open"

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        """Stage ``data`` after everything written so far.

        Raises: WriterClosed, StorageFull, StorageUnavailable, StorageError.
        """
        self._check_usable("write to")
        if not data:
            return
        self._busy = True
        try:
            await self._write(data)
        except BaseException as exc:
            self._fail(f"a write failed: {exc!r}")
            raise
        finally:
            self._busy = False
        self._size += len(data)

    async def commit(self) -> BlobInfo:
        """Publish the staged bytes at ``key`` (see the atomicity notes in ``base``).

        Raises: WriterClosed (already finished, broken, or purged), InvalidKey (the key
        conflicts with the key tree), StorageFull, StorageUnavailable, StorageError. On any
        error the staged bytes are discarded as by ``cancel``.
        """
        self._check_usable("commit")
        self._busy = True
        try:
            info = await self._commit()
        except BaseException:
            self._state = "cancelled"
            # Clean up, but report the commit's error rather than any cleanup error.
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self._cancel()
            raise
        finally:
            self._busy = False
        self._state = "committed"
        return info

    async def cancel(self) -> None:
        """Discard what this writer staged (an append writer restores the previous size).

        Idempotent. Raises: WriterClosed (already committed), StorageError.
        """
        if self._state == "committed":
            raise WriterClosed(f"writer for {self.key!r} was already committed; cannot cancel")
        if self._state == "cancelled":
            return
        if self._busy:
            raise StorageError(f"writer for {self.key!r} is busy in another task")
        self._state = "cancelled"
        await self._cancel()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._state in ("open", "failed"):
            with anyio.CancelScope(shield=True):  # staging must go even if we are cancelled
                await self.cancel()

    def _fail(self, why: str) -> None:
        """Break the writer (also used by backends whose staging was purged)."""
        if self._state == "open":
            self._state = "failed"
            self._why_closed = why

    def _check_usable(self, verb: str) -> None:
        if self._state != "open":
            detail = f": {self._why_closed}" if self._why_closed else ""
            raise WriterClosed(f"cannot {verb} {self.key!r}: writer is {self._state}{detail}")
        if self._busy:
            raise StorageError(f"writer for {self.key!r} is busy in another task")

    @abstractmethod
    async def _write(self, data: bytes | bytearray | memoryview) -> None: ...

    @abstractmethod
    async def _commit(self) -> BlobInfo: ...

    @abstractmethod
    async def _cancel(self) -> None:
        """Discard staged bytes; must tolerate being called after a failed write or commit."""
