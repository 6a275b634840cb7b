"""Storage drivers: a dumb async ``key -> bytes`` store behind one contract.

``base`` holds the contract (read its docstring first), ``errors`` the error vocabulary,
``keys`` the key rules, ``factory.create_store`` picks a backend from a spec string,
``filesystem`` and ``memory`` are the backends, and ``testing.BlobStoreConformance`` is
the suite every backend passes. The key layout lives in ``hub_server/registry/core/paths.py``.
"""

from .base import DEFAULT_CHUNK_SIZE, BlobInfo, BlobStore, BlobStream, BlobWriter, Capabilities
from .errors import (
    BlobNotFound,
    InvalidKey,
    InvalidRange,
    StorageError,
    StorageFull,
    StorageUnavailable,
    WriterClosed,
)
from .factory import create_store
from .keys import validate_key, validate_prefix

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "BlobInfo",
    "BlobNotFound",
    "BlobStore",
    "BlobStream",
    "BlobWriter",
    "Capabilities",
    "InvalidKey",
    "InvalidRange",
    "StorageError",
    "StorageFull",
    "StorageUnavailable",
    "WriterClosed",
    "create_store",
    "validate_key",
    "validate_prefix",
]
