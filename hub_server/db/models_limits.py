"""What bounds a tenant (issue 27): namespace quotas, what a namespace is charged, file proofs.

::

    namespace_quotas (namespace PK, storage_bytes, updated_at)    a namespace's own storage quota
                                                                   (NULL: the hub default,
                                                                   FORKD_HUB_NAMESPACE_QUOTA; -1: none)
    namespace_usage  (namespace PK, stored_bytes, counted_at,     the unique bytes it is charged:
                      updated_at)                                  recounted exactly at counted_at,
                                                                   raised by each push since
                                                                   (registry/content/quotas.py)
    file_proofs      (digest PK, sha256, size, proven_at)          a chunked file's declared sha256,
                                                                   proven over its assembled bytes at
                                                                   push (registry/push/fileproof.py)

A namespace without a ``namespace_usage`` row has not been counted yet. See docs/limits.md.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, String
from sqlmodel import Field, SQLModel

from hub_server.db.models import DIGEST_TYPE
from hub_server.db.types import UTCDateTime, utcnow

__all__ = ["UNLIMITED", "FileProof", "NamespaceQuota", "NamespaceUsage"]

#: ``namespace_quotas.storage_bytes`` of a namespace with no storage quota, whatever the hub default.
UNLIMITED = -1


class NamespaceQuota(SQLModel, table=True):
    __tablename__ = "namespace_quotas"

    namespace: str = Field(sa_column=Column(String(64), primary_key=True))
    storage_bytes: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """Unique bytes the namespace may reference; None: the hub default; ``UNLIMITED``: no quota."""
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False))


class NamespaceUsage(SQLModel, table=True):
    __tablename__ = "namespace_usage"

    namespace: str = Field(sa_column=Column(String(64), primary_key=True))
    stored_bytes: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    counted_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False))
    """When ``stored_bytes`` was last counted exactly (pushes since only added to it)."""
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False))


class FileProof(SQLModel, table=True):
    """A chunked file (named by its digest: a chunk tree in format v2, blake3 of its bytes in v1) whose
    assembled bytes were hashed by the hub: their sha256 and size."""

    __tablename__ = "file_proofs"

    digest: str = Field(sa_column=Column(DIGEST_TYPE, primary_key=True))
    sha256: str = Field(sa_column=Column(String(80), nullable=False))
    size: int = Field(sa_column=Column(BigInteger, nullable=False))
    proven_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False))
