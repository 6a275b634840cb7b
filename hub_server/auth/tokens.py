"""Token lifecycle: create, list, revoke, and authenticate a request.

A token is ``fkd_`` + 43 URL-safe characters (256 bits from :mod:`secrets`). The plaintext
is returned once by :meth:`TokenService.create` and never stored: the database holds its
SHA-256 (looked up by that hash, then compared with :func:`hmac.compare_digest`) and its first
8 characters for display. ``last_used_at`` is written at most once a minute per token, so
authenticating stays a read on the hot path.

Errors (``hub_server.auth.errors``): ``Unauthorized`` (with ``reason`` one of ``malformed``,
``unknown``, ``revoked``, ``expired``), ``InvalidTokenName``, ``InvalidScope``,
``InvalidDuration``, ``TokenExists``, ``TokenNotFound``.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import or_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.errors import (
    InvalidDuration,
    InvalidScope,
    InvalidTokenName,
    TokenExists,
    TokenNotFound,
    Unauthorized,
)
from hub_server.auth.models import Token, utcnow
from hub_server.auth.scopes import Principal, Scope

__all__ = ["TOKEN_PREFIX", "TokenInfo", "TokenService", "hash_secret", "parse_duration"]

TOKEN_PREFIX = "fkd_"
_SECRET = re.compile(r"fkd_[A-Za-z0-9_-]{43}")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: Names the audit log uses for callers that are not tokens.
_RESERVED_NAMES = frozenset({"anonymous"})
_LAST_USED_GRANULARITY = timedelta(minutes=1)
_DURATION = re.compile(r"([0-9]{1,9})([dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(text: str) -> timedelta | None:
    """Parse ``30d``, ``12h``, ``90m``, ``3600s`` (a positive whole number and one unit) or
    ``never`` (→ ``None``).

    Raises:
        InvalidDuration: anything else, including zero.
    """
    if text == "never":
        return None
    match = _DURATION.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidDuration(str(text), "use a whole number with d, h, m or s (e.g. 30d, 12h) or 'never'")
    amount = int(match.group(1))
    if amount == 0:
        raise InvalidDuration(text, "must be greater than zero")
    return timedelta(**{_UNITS[match.group(2)]: amount})


def hash_secret(secret: str) -> str:
    """The hex SHA-256 of a token's plaintext: what the database stores."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    """What a listing shows about a token; never the secret."""

    name: str
    prefix: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    def status(self, now: datetime | None = None) -> str:
        """``"revoked"``, ``"expired"`` or ``"active"`` at ``now`` (default: the current time)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= (now or utcnow()):
            return "expired"
        return "active"

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """A JSON-ready dict (ISO 8601 times) including the status."""

        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "name": self.name,
            "prefix": self.prefix,
            "scopes": list(self.scopes),
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "revoked_at": iso(self.revoked_at),
            "last_used_at": iso(self.last_used_at),
            "status": self.status(now),
        }

    @classmethod
    def from_row(cls, row: Token) -> TokenInfo:
        return cls(
            name=row.name,
            prefix=row.prefix,
            scopes=tuple(row.scope_list),
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
            last_used_at=row.last_used_at,
        )


def _validate_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidTokenName(str(name), "use 1-64 characters from A-Z, a-z, 0-9, '_', '.', '-'")
    if name.lower() in _RESERVED_NAMES:
        raise InvalidTokenName(name, "reserved for callers without a token")


class TokenService:
    """Creates, lists, revokes and checks tokens in the metadata database.

    ``session_factory`` is an ``async_sessionmaker`` (``hub_server.db.engine``); ``clock``
    returns the current aware UTC time and exists so tests can move time without sleeping.
    """

    def __init__(
        self,
        session_factory: async_sessionmaker[AsyncSession],
        *,
        clock: Callable[[], datetime] = utcnow,
        max_scopes: int = 100,
    ) -> None:
        self._sessions = session_factory
        self._clock = clock
        self.max_scopes = max_scopes
        """Scopes one token may carry (``FORKD_HUB_TOKEN_SCOPES``): every request it makes reads them."""

    async def create(
        self, name: str, scopes: Sequence[str], expires_in: timedelta | None, *, not_after: datetime | None = None
    ) -> str:
        """Create a token and return its plaintext (the only time it is ever available).

        ``scopes`` are scope strings (duplicates are dropped, order kept); ``expires_in=None``
        means it never expires; ``not_after`` caps the expiry (a token made by another expires no later).

        Raises:
            InvalidTokenName: ``name`` is not ``[A-Za-z0-9_.-]{1,64}`` or is reserved.
            InvalidScope: a scope does not parse, ``scopes`` is empty or longer than ``max_scopes``.
            InvalidDuration: ``expires_in`` is zero or negative.
            TokenExists: an unrevoked token (expired or not) already has this name.
        """
        _validate_name(name)
        if isinstance(scopes, str):
            raise InvalidScope(scopes, "pass a list of scopes, not one string")
        canonical = list(dict.fromkeys(str(Scope.parse(s)) for s in scopes))
        if not canonical:
            raise InvalidScope("", "a token needs at least one scope")
        if len(canonical) > self.max_scopes:
            raise InvalidScope(
                f"{len(canonical)} scopes",
                f"a token carries at most {self.max_scopes} (FORKD_HUB_TOKEN_SCOPES); use patterns such as pull:acme/*",
            )
        if expires_in is not None and expires_in <= timedelta(0):
            raise InvalidDuration(str(expires_in), "must be greater than zero")
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = self._clock()
        row = Token(
            name=name,
            token_hash=hash_secret(secret),
            prefix=secret[:8],
            scopes=json.dumps(canonical),
            created_at=now,
            expires_at=None if expires_in is None else now + expires_in,
        )
        if not_after is not None and (row.expires_at is None or row.expires_at > not_after):
            if not_after <= now:
                raise InvalidDuration(str(not_after), "the cap is in the past")
            row.expires_at = not_after
        async with self._sessions() as session:
            existing = await session.exec(select(Token.id).where(Token.name == name, col(Token.revoked_at).is_(None)))
            if existing.first() is not None:
                raise TokenExists(name)
            session.add(row)
            try:
                await session.commit()
            except IntegrityError as e:  # a concurrent create won the race for the name
                raise TokenExists(name) from e
        return secret

    async def list(self) -> builtins.list[TokenInfo]:
        """Every token, revoked ones included, oldest first. Never returns secrets."""
        async with self._sessions() as session:
            rows = await session.exec(select(Token).order_by(col(Token.created_at), col(Token.id)))
            return [TokenInfo.from_row(row) for row in rows.all()]

    async def get(self, name: str) -> TokenInfo:
        """The unrevoked token named ``name`` (expired or not).

        Raises:
            TokenNotFound: no unrevoked token has that name.
        """
        async with self._sessions() as session:
            result = await session.exec(select(Token).where(Token.name == name, col(Token.revoked_at).is_(None)))
            row = result.first()
        if row is None:
            raise TokenNotFound(name)
        return TokenInfo.from_row(row)

    async def revoke(self, name: str) -> TokenInfo:
        """Revoke the unrevoked token named ``name`` and return its final state.

        Raises:
            TokenNotFound: no token has that name, or it is already revoked.
        """
        async with self._sessions() as session:
            result = await session.exec(select(Token).where(Token.name == name, col(Token.revoked_at).is_(None)))
            row = result.first()
            if row is None:
                revoked = await session.exec(select(Token.id).where(Token.name == name))
                reason = "already revoked" if revoked.first() is not None else "no such token"
                raise TokenNotFound(name, reason)
            row.revoked_at = self._clock()
            session.add(row)
            await session.commit()
            return TokenInfo.from_row(row)

    async def authenticate(self, secret: str) -> Principal:
        """The principal a token's plaintext stands for.

        Raises:
            Unauthorized: ``reason`` is ``malformed`` (not a forkd-hub token), ``unknown``,
                ``revoked`` or ``expired``. Messages never mention other tokens.
        """
        return (await self.authenticate_with_lifetime(secret))[0]

    async def authenticate_with_lifetime(self, secret: str) -> tuple[Principal, float | None]:
        """:meth:`authenticate`, and the seconds the token has left (``None``: it never expires).

        Raises: as :meth:`authenticate`.
        """
        if not isinstance(secret, str) or not _SECRET.fullmatch(secret):
            raise Unauthorized("malformed token: expected 'fkd_' followed by 43 characters", "malformed")
        digest = hash_secret(secret)
        async with self._sessions() as session:
            result = await session.exec(select(Token).where(Token.token_hash == digest))
            row = result.first()
        # The lookup is by hash (an attacker cannot steer it); compare_digest keeps the final
        # check constant-time whatever the database's comparison does.
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            raise Unauthorized("unknown token", "unknown")
        now = self._clock()
        if row.revoked_at is not None:
            raise Unauthorized("the token has been revoked", "revoked")
        if row.expires_at is not None and row.expires_at <= now:
            raise Unauthorized("the token has expired", "expired")
        if row.last_used_at is None or now - row.last_used_at >= _LAST_USED_GRANULARITY:
            await self._touch(row.id, now)
        left = None if row.expires_at is None else (row.expires_at - now).total_seconds()
        return Principal(row.name, tuple(Scope.parse(s) for s in row.scope_list)), left

    async def _touch(self, token_id: int | None, now: datetime) -> None:
        # Conditional, so concurrent requests within the same minute write at most once.
        cutoff = now - _LAST_USED_GRANULARITY
        async with self._sessions() as session:
            await session.exec(
                update(Token)
                .where(col(Token.id) == token_id)
                .where(or_(col(Token.last_used_at).is_(None), col(Token.last_used_at) <= cutoff))
                .values(last_used_at=now)
            )
            await session.commit()
