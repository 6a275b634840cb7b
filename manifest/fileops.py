"""Low-level file operations for sparse images: data ranges, cloning, hole punching.

These are the filesystem's best tools, with fallbacks that always work:

- :func:`data_ranges` walks a file with ``SEEK_DATA``/``SEEK_HOLE`` so a 16 GiB
  mostly-empty ``memory.bin`` is scanned at the speed of its allocated bytes.
- :func:`clone_file` makes a copy that shares extents on XFS/btrfs (``FICLONE``),
  lets the kernel copy elsewhere (``copy_file_range``) and keeps holes as holes.
- :func:`can_reflink` tells (probed once per filesystem) whether ``FICLONE`` works there;
  where it does not, :func:`copy_ranges_except` copies a parent around the byte ranges a child
  writes itself, so the two can run at once without the copy clobbering a newer chunk.
- :func:`punch_hole` turns a byte range back into a hole (zero chunks stay holes).
- :func:`start_writeback` starts flushing a file early, so its final ``fsync`` waits less.
- :func:`atomic_write` / :func:`write_atomically`: the one way this project publishes a file
  all-or-nothing (temp file next to it, ``fsync``, ``os.replace``; the temp file removed on error).

Errors are plain ``OSError`` (``ENOSPC`` and friends): these are filesystem facts.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import functools
import os
import secrets
import threading
from collections.abc import Iterator
from enum import StrEnum
from typing import IO, Any, Literal

FICLONE = 0x40049409  # _IOW(0x94, 9, int) from linux/fs.h (forkd's 0x40209409 is wrong)
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_SYNC_FILE_RANGE_WRITE = 0x02
_COPY_STEP = 64 << 20
_NO_CLONE = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EBADF, errno.EPERM}


class CloneMethod(StrEnum):
    """How :func:`clone_file` produced the copy."""

    REFLINK = "reflink"
    COPY_FILE_RANGE = "copy_file_range"
    SPARSE_COPY = "sparse_copy"


def data_ranges(fd: int, size: int | None = None) -> Iterator[tuple[int, int]]:
    """Yield ``(offset, length)`` of the allocated data regions of an open file.

    Falls back to one range covering the whole file when the filesystem does not
    support ``SEEK_DATA``. Ranges never extend past ``size`` (default: file size).
    """
    if size is None:
        size = os.fstat(fd).st_size
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data after pos
                return
            if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                yield pos, size - pos
                return
            raise
        if start >= size:
            return
        end = os.lseek(fd, start, os.SEEK_HOLE)
        end = min(end, size)
        yield start, end - start
        pos = end


def allocated_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes actually allocated on disk (``st_blocks * 512``)."""
    return os.stat(path).st_blocks * 512


def punch_hole(fd: int, offset: int, length: int) -> None:
    """Deallocate ``[offset, offset+length)`` so it reads back as zeros.

    Falls back to writing zeros where the filesystem cannot punch holes.
    """
    if length <= 0:
        return
    try:
        _fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        zeros = bytes(min(length, 1 << 20))
        done = 0
        while done < length:
            n = min(len(zeros), length - done)
            os.pwrite(fd, zeros[:n], offset + done)
            done += n


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, loaded once (glibc's soname first: ``find_library`` runs a subprocess)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long, ctypes.c_uint]
    return libc


def _fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    if _libc().fallocate(fd, mode, offset, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def start_writeback(fd: int) -> None:
    """Start writing the file's dirty pages to disk without waiting (Linux ``sync_file_range``
    with ``SYNC_FILE_RANGE_WRITE``), so a later ``fsync`` has less to wait for. Durability
    still needs that ``fsync``. Best effort: does nothing where unsupported."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def clone_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, replace: bool = False) -> CloneMethod:
    """Copy ``src`` to a new file ``dst`` as cheaply as the filesystem allows.

    Tries a reflink (``FICLONE``), then ``copy_file_range`` over the data ranges
    only, then a plain read/write of the data ranges; holes stay holes in every
    case. ``dst`` must not exist (it is created with ``O_EXCL``), unless ``replace``:
    then the copy is made next to it and renamed over it, so ``dst`` is the old file
    or the whole new one, never a part. On failure the partial copy is removed and
    the OSError propagates.
    """
    if replace:
        tmp = _temp_name(dst)
        method = clone_file(src, tmp)
        try:
            os.replace(tmp, dst)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return method
    with open(src, "rb") as fsrc:
        size = os.fstat(fsrc.fileno()).st_size
        dfd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                fcntl.ioctl(dfd, FICLONE, fsrc.fileno())
                return CloneMethod.REFLINK
            except OSError as e:
                if e.errno not in _NO_CLONE:
                    raise
            os.ftruncate(dfd, size)
            method = _copy_ranges(fsrc.fileno(), dfd, size)
            return method
        except BaseException:
            os.close(dfd)
            dfd = -1
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dst)
            raise
        finally:
            if dfd >= 0:
                os.close(dfd)


def copy_data_ranges(sfd: int, dfd: int) -> int:
    """Copy every data range of file ``sfd`` into ``dfd`` at the same offsets; holes are skipped.

    Returns the bytes copied. Applies a sparse diff (dirty pages at their offsets) onto a copy
    of its base. Raises OSError.
    """
    size = os.fstat(sfd).st_size
    _copy_ranges(sfd, dfd, size)
    return sum(length for _, length in data_ranges(sfd, size))


def copy_ranges_except(sfd: int, dfd: int, size: int, keep: list[tuple[int, int]]) -> CloneMethod:
    """Copy the data ranges of ``sfd`` below ``size`` into ``dfd`` at the same offsets, except the
    byte ranges ``keep`` (``(offset, length)``, sorted by offset, not overlapping): those bytes of
    ``dfd`` are never written, so whatever another thread writes there (before, during or after
    this copy) stays. Holes are skipped. Raises OSError."""
    return _copy_ranges(sfd, dfd, size, _without(data_ranges(sfd, size), keep))


def _without(ranges: Iterator[tuple[int, int]], keep: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """``ranges`` (sorted) minus the sorted, disjoint ranges ``keep``."""
    k = 0
    for offset, length in ranges:
        pos, end = offset, offset + length
        while k < len(keep) and keep[k][0] + keep[k][1] <= pos:
            k += 1
        j = k
        while pos < end:
            if j >= len(keep) or keep[j][0] >= end:
                yield pos, end - pos
                break
            if keep[j][0] > pos:
                yield pos, keep[j][0] - pos
            pos = max(pos, keep[j][0] + keep[j][1])
            j += 1


_reflinks: dict[int, bool] = {}
_reflinks_lock = threading.Lock()


def can_reflink(directory: str | os.PathLike[str]) -> bool:
    """Whether the filesystem holding ``directory`` shares extents (``FICLONE``): probed once per
    filesystem by cloning a one-block file there (removed again); False where the probe fails."""
    device = os.stat(directory).st_dev
    with _reflinks_lock:
        known = _reflinks.get(device)
        if known is not None:
            return known
        src, dst = (
            _temp_name(os.path.join(directory, ".reflink-probe")),
            _temp_name(os.path.join(directory, ".reflink-probe")),
        )
        answer = False
        try:
            with open(src, "x+b") as fsrc, open(dst, "xb") as fdst:
                fsrc.write(bytes(4096))
                fsrc.flush()
                fcntl.ioctl(fdst.fileno(), FICLONE, fsrc.fileno())
                answer = True
        except OSError:
            answer = False
        finally:
            for name in (src, dst):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        _reflinks[device] = answer
        return answer


def _copy_ranges(sfd: int, dfd: int, size: int, ranges: Iterator[tuple[int, int]] | None = None) -> CloneMethod:
    method = CloneMethod.COPY_FILE_RANGE
    for offset, length in data_ranges(sfd, size) if ranges is None else ranges:
        done = 0
        while done < length:
            step = min(_COPY_STEP, length - done)
            pos = offset + done
            if method is CloneMethod.COPY_FILE_RANGE:
                try:
                    n = os.copy_file_range(sfd, dfd, step, pos, pos)
                except OSError as e:
                    if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                    method = CloneMethod.SPARSE_COPY
                    continue
                if n == 0:
                    raise OSError(errno.EIO, f"copy_file_range made no progress at offset {pos}")
            else:
                data = os.pread(sfd, step, pos)
                if not data:
                    raise OSError(errno.EIO, f"unexpected end of file at offset {pos}")
                n = os.pwrite(dfd, data, pos)
            done += n
    return method


def _temp_name(path: str | os.PathLike[str]) -> str:
    """A fresh name next to ``path`` (same directory, so ``os.replace`` stays on one filesystem)."""
    directory, name = os.path.split(os.fspath(path))
    return os.path.join(directory, f"{name}.{secrets.token_hex(4)}.partial")


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], *, mode: Literal["wb", "w"] = "wb", perms: int = 0o666, sync_dir: bool = False
) -> Iterator[IO[Any]]:
    """Write ``path`` all or nothing: readers see the old file or the whole new one.

    Yields a file opened on ``<path>.<random>.partial`` in the same directory (created with
    ``perms`` less the umask; text mode is UTF-8). When the block ends normally the file is
    flushed, ``fsync``ed and renamed over ``path`` (then the directory is ``fsync``ed too if
    ``sync_dir``); if the block raises, the partial file is removed and the error propagates.
    Two writers at once never share a temp file: the last rename wins. Raises OSError.
    """
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, perms)
    try:
        with open(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if sync_dir:
        fsync_dir(os.path.dirname(os.fspath(path)) or ".")


def write_atomically(path: str | os.PathLike[str], data: bytes | str, *, perms: int = 0o666) -> None:
    """Replace ``path`` with ``data`` all or nothing (see :func:`atomic_write`). Raises OSError."""
    if isinstance(data, str):
        with atomic_write(path, mode="w", perms=perms) as f:
            f.write(data)
    else:
        with atomic_write(path, perms=perms) as f:
            f.write(data)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """``fsync`` a directory, so a rename or a new entry in it survives a crash. Raises OSError."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
