"""``FilesystemStore``: keys are files under a root directory.

Layout::

    <root>/
    ├── _staging/<random>.part   fresh writers' temp files (never listed; purge_staging
    │                            removes crash leftovers)
    └── <key>                    one regular file per committed key, e.g. blobs/blake3/ab/…

A commit writes the temp file, ``fsync``s it, ``os.replace``s it onto the key's path and
``fsync``s the parent directory (and every directory it had to create), so after a crash
a key holds its old or its new bytes. Append writers write the key's file in place (see
``append_isolated=False``). Every blocking call runs in a worker thread via
``anyio.to_thread`` (cancellation waits for the call to finish, so a file descriptor is
never closed under a running thread). Each path is re-checked after resolving symlinks so
no key can reach outside the root.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio.to_thread

from manifest.fileops import fsync_dir

from .base import BlobInfo, BlobStore, BlobStream, BlobWriter, Capabilities, checked_range
from .errors import BlobNotFound, InvalidKey, StorageError, StorageUnavailable, WriterClosed, from_os_error
from .keys import RESERVED_PREFIX, validate_key

__all__ = ["FilesystemStore"]

STAGING_DIR = RESERVED_PREFIX + "staging"
WRITE_BUFFER = 256 * 1024  # coalesce small writes so each thread hop moves a useful amount
_PUBLISH_ATTEMPTS = 3  # a concurrent delete may prune a parent directory we just created

_R = TypeVar("_R")


async def _in_thread(key: str, func: Callable[..., _R], *args: Any) -> _R:
    """Run blocking ``func`` in a worker thread, translating ``OSError`` for ``key``."""
    try:
        return await anyio.to_thread.run_sync(func, *args)
    except StorageError:
        raise
    except OSError as exc:
        raise from_os_error(exc, key) from exc


class FilesystemStore(BlobStore):
    """Blob store rooted at ``root`` (created if missing, together with ``root/_staging``).

    Raises (constructor): StorageUnavailable if the root cannot be created or used.
    """

    name = "filesystem"
    capabilities = Capabilities(
        supports_redirect=False,
        atomic_move=True,
        supports_append=True,
        append_isolated=False,
        enforces_key_tree=True,
    )

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        try:
            os.makedirs(os.path.join(root, STAGING_DIR), exist_ok=True)
            self.root = os.path.realpath(root)
        except OSError as exc:
            raise StorageUnavailable(f"cannot use {os.fspath(root)!r} as a blob store root: {exc}") from exc
        self.staging = os.path.join(self.root, STAGING_DIR)

    def __repr__(self) -> str:
        return f"FilesystemStore(root={self.root!r})"

    # -- hooks ---------------------------------------------------------------------------

    async def _stat(self, key: str) -> BlobInfo:
        return await _in_thread(key, self._stat_sync, key)

    async def _open(self, key: str, offset: int, length: int | None, chunk_size: int) -> BlobStream:
        fd, size = await _in_thread(key, self._open_sync, key, os.O_RDONLY)
        try:
            selected = checked_range(key, size, offset, length)
        except BaseException:
            os.close(fd)
            raise
        return _FileStream(key, offset, selected, chunk_size, fd)

    async def _writer(self, key: str, append: bool) -> BlobWriter:
        if append:
            fd, size = await _in_thread(key, self._open_sync, key, os.O_WRONLY | os.O_APPEND)
            return _FileWriter(self, key, fd, None, size=size)
        fd, path = await _in_thread(key, self._create_staging_file)
        return _FileWriter(self, key, fd, path, size=0)

    async def _delete(self, key: str) -> None:
        await _in_thread(key, self._delete_sync, key)

    async def _move(self, src: str, dst: str) -> None:
        await _in_thread(dst, self._move_sync, src, dst)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        # Depth-first walk where a directory sorts as "name/": that yields keys in the
        # same order as sorting the full key strings (S3's order), one directory at a time.
        start = await _in_thread(prefix, self._kind, prefix)
        if start == "file":
            yield prefix
            return
        if start is None:
            return
        pending: list[tuple[str, bool]] = [(prefix, True)]
        while pending:
            key, is_dir = pending.pop()
            if not is_dir:
                yield key
                continue
            children = await _in_thread(key, self._children_sync, key)
            pending.extend(reversed(children))

    async def _usage(self) -> int:
        return await _in_thread("", self._usage_sync)

    async def _purge_staging(self, older_than: timedelta) -> int:
        return await _in_thread(STAGING_DIR, self._purge_sync, older_than.total_seconds())

    async def _free_bytes(self) -> int | None:
        st = await _in_thread("", os.statvfs, self.root)
        return st.f_bavail * st.f_frsize

    # -- blocking helpers (run in worker threads) -----------------------------------------

    def _path(self, key: str) -> str:
        """The file for ``key``, after checking that symlinks do not lead outside the root."""
        path = os.path.join(self.root, *key.split("/")) if key else self.root
        real = os.path.realpath(path)
        if real != path and not real.startswith(self.root + os.sep):
            raise InvalidKey(key, "it resolves outside the store root")
        return path

    def _stat_sync(self, key: str) -> BlobInfo:
        st = os.stat(self._path(key))
        if not stat.S_ISREG(st.st_mode):
            raise BlobNotFound(key)
        return BlobInfo(key, st.st_size, _mtime(st))

    def _open_sync(self, key: str, flags: int) -> tuple[int, int]:
        fd = os.open(self._path(key), flags | os.O_CLOEXEC)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise BlobNotFound(key)
        return fd, st.st_size

    def _create_staging_file(self) -> tuple[int, str]:
        path = os.path.join(self.staging, uuid.uuid4().hex + ".part")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            return os.open(path, flags, 0o644), path
        except FileNotFoundError:  # someone removed _staging; recreate it once
            os.makedirs(self.staging, exist_ok=True)
            return os.open(path, flags, 0o644), path

    def _delete_sync(self, key: str) -> None:
        path = self._path(key)
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise BlobNotFound(key)
        os.unlink(path)
        self._prune(os.path.dirname(path))

    def _move_sync(self, src: str, dst: str) -> None:
        src_path = self._path(src)
        try:
            if not stat.S_ISREG(os.lstat(src_path).st_mode):
                raise BlobNotFound(src)
        except OSError as exc:
            raise from_os_error(exc, src) from exc

        def src_gone() -> StorageError | None:
            return None if os.path.lexists(src_path) else BlobNotFound(src)

        self._publish(src_path, dst, src_gone)
        self._prune(os.path.dirname(src_path))

    def _publish(self, src_path: str, key: str, src_gone: Callable[[], StorageError | None]) -> None:
        """Atomically rename ``src_path`` onto ``key`` and make the rename durable."""
        dst_path = self._path(key)
        parent = os.path.dirname(dst_path)
        for attempt in range(1, _PUBLISH_ATTEMPTS + 1):
            self._makedirs(parent, key)
            try:
                os.replace(src_path, dst_path)
                break
            except FileNotFoundError:
                if (gone := src_gone()) is not None:
                    raise gone from None
                if attempt == _PUBLISH_ATTEMPTS:
                    raise
            except IsADirectoryError:
                try:  # an empty directory left behind by a crash between unlink and prune
                    os.rmdir(dst_path)
                except OSError:
                    raise InvalidKey(key, "it is already the parent of other keys") from None
        fsync_dir(parent)

    def _makedirs(self, directory: str, key: str) -> None:
        missing: list[str] = []
        while directory != self.root and not os.path.isdir(directory):
            missing.append(directory)
            directory = os.path.dirname(directory)
        for path in reversed(missing):
            try:
                os.mkdir(path)
            except FileExistsError:
                if not os.path.isdir(path):
                    parent_key = os.path.relpath(path, self.root).replace(os.sep, "/")
                    raise InvalidKey(key, f"its parent {parent_key!r} is an object") from None
                continue  # created concurrently
            except NotADirectoryError:
                raise InvalidKey(key, "one of its parents is an object") from None
            fsync_dir(os.path.dirname(path))

    def _prune(self, directory: str) -> None:
        """Remove now-empty parent directories of a deleted key, up to (not including) root."""
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                return  # not empty (or already gone): stop climbing
            directory = os.path.dirname(directory)

    def _kind(self, key: str) -> str | None:
        try:
            mode = os.lstat(self._path(key)).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return None
        return "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else None

    def _children_sync(self, key: str) -> list[tuple[str, bool]]:
        """Sorted ``(child key, is_dir)``; a directory sorts as ``name/`` (see ``_list``)."""
        children: list[tuple[str, str, bool]] = []
        try:
            entries = list(os.scandir(self._path(key)))
        except (FileNotFoundError, NotADirectoryError):
            return []  # removed by a concurrent delete since we saw it
        for entry in entries:
            is_dir = entry.is_dir(follow_symlinks=False)
            if not (is_dir or entry.is_file(follow_symlinks=False)):
                continue
            child = f"{key}/{entry.name}" if key else entry.name
            if not _is_key(child):
                continue  # _staging at the root, or a stray file no key could name
            children.append((entry.name + "/" if is_dir else entry.name, child, is_dir))
        children.sort()
        return [(child, is_dir) for _, child, is_dir in children]

    def _usage_sync(self) -> int:
        total = 0
        for directory, dirs, files in os.walk(self.root):
            if directory == self.root and STAGING_DIR in dirs:
                dirs.remove(STAGING_DIR)
            for name in files:
                try:
                    st = os.lstat(os.path.join(directory, name))
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
        return total

    def _purge_sync(self, idle_seconds: float) -> int:
        purged = 0
        now = time.time()
        for entry in os.scandir(self.staging):
            try:
                if entry.is_file(follow_symlinks=False) and now - entry.stat().st_mtime >= idle_seconds:
                    os.unlink(entry.path)
                    purged += 1
            except FileNotFoundError:
                continue  # committed or cancelled meanwhile
        return purged


def _is_key(key: str) -> bool:
    try:
        validate_key(key)
    except InvalidKey:
        return False
    return True


def _mtime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime, UTC)


def _write_all(fd: int, *chunks: bytes | bytearray | memoryview) -> None:
    for chunk in chunks:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def _pread_exact(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]  # a regular file reads short only at EOF, but be exact anyway
    got = len(data)
    while got < size and (more := os.pread(fd, size - got, position + got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _discard(fd: int, staging_path: str | None) -> None:
    """Finalizer for handles nobody closed: never leak descriptors or staged files."""
    with contextlib.suppress(OSError):
        os.close(fd)
    if staging_path is not None:
        with contextlib.suppress(OSError):
            os.unlink(staging_path)


class _FileStream(BlobStream):
    def __init__(self, key: str, offset: int, length: int, chunk_size: int, fd: int) -> None:
        super().__init__(key, offset, length, chunk_size)
        self._fd = fd  # an open descriptor pins this version even if the key is replaced
        self._finalizer = weakref.finalize(self, _discard, fd, None)

    async def _read_at(self, position: int, size: int) -> bytes:
        return await _in_thread(self.key, _pread_exact, self._fd, size, position)

    async def _release(self) -> None:
        self._finalizer.detach()
        await _in_thread(self.key, os.close, self._fd)


class _FileWriter(BlobWriter):
    """Fresh writers stage into ``staging_path``; append writers (``staging_path=None``)
    write the key's file in place and truncate back to ``start`` on cancel."""

    def __init__(self, store: FilesystemStore, key: str, fd: int, staging_path: str | None, *, size: int) -> None:
        super().__init__(key, append=staging_path is None, size=size)
        self._store = store
        self._fd = fd
        self._staging_path = staging_path
        self._start = size
        self._buffer = bytearray()
        self._finalizer = weakref.finalize(self, _discard, fd, staging_path)

    async def _write(self, data: bytes | bytearray | memoryview) -> None:
        if len(self._buffer) + len(data) < WRITE_BUFFER:
            self._buffer += data
            return
        pending, self._buffer = self._buffer, bytearray()
        await _in_thread(self.key, _write_all, self._fd, pending, data)

    async def _commit(self) -> BlobInfo:
        pending, self._buffer = self._buffer, bytearray()
        info = await _in_thread(self.key, self._commit_sync, pending)
        self._finalizer.detach()
        return info

    async def _cancel(self) -> None:
        self._buffer = bytearray()
        if self._finalizer.detach() is not None:  # still holding the descriptor
            await _in_thread(self.key, self._cancel_sync)

    def _commit_sync(self, pending: bytearray) -> BlobInfo:
        _write_all(self._fd, pending)
        os.fsync(self._fd)
        st = os.fstat(self._fd)
        if self._staging_path is not None:
            if st.st_nlink == 0:
                raise WriterClosed(f"cannot commit {self.key!r}: its staged data was purged")

            def purged() -> StorageError | None:
                gone = os.fstat(self._fd).st_nlink == 0
                return WriterClosed(f"cannot commit {self.key!r}: its staged data was purged") if gone else None

            self._store._publish(self._staging_path, self.key, purged)
        os.close(self._fd)
        return BlobInfo(self.key, st.st_size, _mtime(st))

    def _cancel_sync(self) -> None:
        try:
            if self._staging_path is None:
                os.ftruncate(self._fd, self._start)
        finally:
            os.close(self._fd)
            if self._staging_path is not None:
                # Already gone if purged, or renamed by a commit that failed afterwards.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._staging_path)
