"""Low-level file operations for sparse images: data ranges, cloning, hole punching.

These are the filesystem's best tools, with fallbacks that always work:

- :func:`data_ranges` walks a file with ``SEEK_DATA``/``SEEK_HOLE`` so a 16 GiB
  mostly-empty ``memory.bin`` is scanned at the speed of its allocated bytes.
- :func:`clone_file` makes a copy that shares extents on XFS/btrfs (``FICLONE``),
  lets the kernel copy elsewhere (``copy_file_range``) and keeps holes as holes.
- :func:`punch_hole` turns a byte range back into a hole (zero chunks stay holes).
- :func:`start_writeback` starts flushing a file early, so its final ``fsync`` waits less.

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
from collections.abc import Iterator
from enum import StrEnum

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


def clone_file(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> CloneMethod:
    """Copy ``src`` to a new file ``dst`` as cheaply as the filesystem allows.

    Tries a reflink (``FICLONE``), then ``copy_file_range`` over the data ranges
    only, then a plain read/write of the data ranges; holes stay holes in every
    case. ``dst`` must not exist (it is created with ``O_EXCL``). On failure the
    partial ``dst`` is removed and the OSError propagates.
    """
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


def _copy_ranges(sfd: int, dfd: int, size: int) -> CloneMethod:
    method = CloneMethod.COPY_FILE_RANGE
    for offset, length in data_ranges(sfd, size):
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
