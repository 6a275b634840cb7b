"""Per-repository policies: immutable tags and retention (``registry/content/policy.py``, ``registry/upkeep/retention.py``).

::

    repository_policies (repository_id PK, immutable_tags, immutable_exempt, retention_keep_last,
                         retention_keep_days, retention_pattern, updated_at)

A repository without a row, and a ``NULL`` column, follow the hub-wide defaults
(``FORKD_HUB_IMMUTABLE_TAGS``, ``FORKD_HUB_IMMUTABLE_EXEMPT``; no retention).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Column, ForeignKey, Integer, String
from sqlmodel import Field, SQLModel

from hub_server.db.types import UTCDateTime, utcnow

__all__ = ["RepositoryPolicy"]


class RepositoryPolicy(SQLModel, table=True):
    __tablename__ = "repository_policies"

    repository_id: int = Field(sa_column=Column(ForeignKey("repositories.id", ondelete="CASCADE"), primary_key=True))
    immutable_tags: bool | None = Field(default=None, sa_column=Column(Boolean, nullable=True))
    """True: a tag never moves to another digest once set; None: the hub-wide default."""
    immutable_exempt: str | None = Field(default=None, sa_column=Column(String(256), nullable=True))
    """Comma-separated tag globs that stay movable (e.g. ``latest,dev-*``); None: the hub-wide default."""
    retention_keep_last: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    """Keep the N most recently set tags matching ``retention_pattern``; None: no count rule."""
    retention_keep_days: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    """Keep the matching tags set within the last D days; None: no age rule."""
    retention_pattern: str | None = Field(default=None, sa_column=Column(String(256), nullable=True))
    """Comma-separated tag globs retention applies to; None: every tag."""
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime(), nullable=False))
