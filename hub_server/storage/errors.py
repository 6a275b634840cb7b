"""The storage layer's error vocabulary.

Every backend raises only these (foreign errors such as ``OSError`` or botocore's
``ClientError`` are translated at the backend's boundary). Each class also subclasses
the stdlib exception that means the same thing, so generic code can catch
``FileNotFoundError`` or ``ValueError`` without importing this module::

    StorageError(Exception)                   anything the storage layer raises
    ├── BlobNotFound(FileNotFoundError)       no object at that key
    ├── InvalidKey(ValueError)                key malformed, reserved, escapes the root, or
    │                                         conflicts with the key tree
    ├── InvalidRange(ValueError)              offset/length outside the object
    ├── WriterClosed                          writer used after commit/cancel/failure
    ├── StorageFull(OSError)                  the backend ran out of space (ENOSPC, quota)
    └── StorageUnavailable                    backend unreachable, or the store was closed
"""

from __future__ import annotations

import errno

__all__ = [
    "BlobNotFound",
    "InvalidKey",
    "InvalidRange",
    "StorageError",
    "StorageFull",
    "StorageUnavailable",
    "WriterClosed",
    "from_os_error",
]


class StorageError(Exception):
    """Base class of every error raised by a blob store."""


class BlobNotFound(StorageError, FileNotFoundError):
    """No object is stored at ``key`` (directories and staged writes are not objects)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"blob not found: {key!r}")


class InvalidKey(StorageError, ValueError):
    """``key`` is not a valid storage key; ``reason`` says which rule it broke."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"invalid storage key {key!r}: {reason}")


class InvalidRange(StorageError, ValueError):
    """A read asked for bytes outside ``[0, size]`` of the object at ``key``."""

    def __init__(self, key: str, offset: int, length: int | None, size: int | None) -> None:
        self.key = key
        self.offset = offset
        self.length = length
        self.size = size
        wanted = f"offset {offset}" + ("" if length is None else f" length {length}")
        where = "" if size is None else f" of a {size}-byte object"
        super().__init__(f"invalid range for {key!r}: {wanted}{where}")


class WriterClosed(StorageError):
    """A writer was used after it was committed, cancelled, purged, or broken by an error."""


class StorageFull(StorageError, OSError):
    """The backend has no space left (``ENOSPC``/``EDQUOT`` or an object-store quota)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)


class StorageUnavailable(StorageError):
    """The backend cannot be reached (or the store was closed); retrying later may help."""


def from_os_error(exc: OSError, key: str) -> StorageError:
    """Translate an ``OSError`` raised while handling ``key`` into this vocabulary.

    Not-found style errors become ``BlobNotFound`` (a directory or a file in the way is
    "not an object" as far as readers are concerned), space errors ``StorageFull``, and
    everything else a ``StorageError`` naming the key and the original error.
    """
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
        return BlobNotFound(key)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageFull(f"no space left while writing {key!r}: {exc.strerror}")
    if exc.errno == errno.ENAMETOOLONG:
        return InvalidKey(key, "a path component is too long for this filesystem")
    return StorageError(f"storage I/O error on {key!r}: {exc}")
