"""The ``tokens`` table: API tokens, hashed at rest.

Only ``sha256(secret)`` is stored (``token_hash``), never the secret; ``prefix`` keeps its
first 8 characters (``fkd_`` + 4) so people can tell tokens apart in listings. A name is
unique among *unrevoked* tokens (a partial unique index), so a revoked token's name can be
reused while its row stays for the record.

Timestamps are timezone-aware UTC in Python on every backend (:class:`UTCDateTime`).
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import Column, ForeignKey, Index, Integer, String, Text, text
from sqlmodel import Field, SQLModel

from hub_server.db.types import UTCDateTime, utcnow  # re-exported: the tables' time type lives with the db

__all__ = ["RegistryToken", "Token", "UTCDateTime", "WebSessionEnd", "utcnow"]


class Token(SQLModel, table=True):
    """One API token. ``scopes`` is a JSON list of scope strings (see ``auth.scopes``)."""

    __tablename__ = "tokens"
    __table_args__ = (
        Index(
            "uq_tokens_active_name",
            "name",
            unique=True,
            sqlite_where=text("revoked_at IS NULL"),
            postgresql_where=text("revoked_at IS NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(sa_column=Column(String(64), nullable=False))
    token_hash: str = Field(sa_column=Column(String(64), nullable=False, unique=True))
    prefix: str = Field(sa_column=Column(String(8), nullable=False))
    scopes: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False))
    expires_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime(), nullable=True))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime(), nullable=True))
    last_used_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime(), nullable=True))

    @property
    def scope_list(self) -> list[str]:
        """The scopes as strings, in the order they were granted."""
        return list(json.loads(self.scopes))


class RegistryToken(SQLModel, table=True):
    """A short-lived token the ``/v2/token`` endpoint issued for an API token (``auth.registry_tokens``).

    ``scopes`` is the JSON list of scope strings granted (never more than the parent's);
    the parent's revocation or expiry ends it too. Rows are deleted once expired.
    """

    __tablename__ = "registry_tokens"

    id: int | None = Field(default=None, primary_key=True)
    token_hash: str = Field(sa_column=Column(String(64), nullable=False, unique=True))
    parent_id: int = Field(sa_column=Column(Integer, ForeignKey("tokens.id", ondelete="CASCADE"), nullable=False))
    scopes: str = Field(sa_column=Column(Text, nullable=False))
    expires_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False, index=True))


class WebSessionEnd(SQLModel, table=True):
    """A web catalog session signed out before its cookie expires (``auth/web_sessions.py``): a copy of
    the cookie is refused from then on. Rows go once ``ends_at`` (the cookie's own expiry) has passed."""

    __tablename__ = "web_session_ends"

    session_id: str = Field(sa_column=Column(String(32), primary_key=True))
    ends_at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False, index=True))
