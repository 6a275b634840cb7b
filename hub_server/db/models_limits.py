"""What bounds a tenant (issue 27): namespace storage quotas.

::

    namespace_quotas (namespace PK, storage_bytes, updated_at)    a namespace's own storage quota
                                                                   (NULL: the hub default,
                                                                   FORKD_HUB_NAMESPACE_QUOTA; -1: none)

What a namespace uses is counted when asked (registry/content/quotas.py). See docs/limits.md.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, String
from sqlmodel import Field, SQLModel

from hub_server.db.types import UTCDateTime, utcnow

__all__ = ["UNLIMITED", "NamespaceQuota"]

#: ``namespace_quotas.storage_bytes`` of a namespace with no storage quota, whatever the hub default.
UNLIMITED = -1


class NamespaceQuota(SQLModel, table=True):
    __tablename__ = "namespace_quotas"

    namespace: str = Field(sa_column=Column(String(64), primary_key=True))
    storage_bytes: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """Unique bytes the namespace may reference; None: the hub default; ``UNLIMITED``: no quota."""
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False))
