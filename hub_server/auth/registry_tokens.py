"""Short-lived registry tokens: what ``/v2/token`` hands OCI clients (skopeo, oras, podman).

A registry token is ``fkr_`` + 43 URL-safe characters, opaque, valid for
:data:`REGISTRY_TOKEN_LIFETIME`, and limited to the scopes granted when it was issued (a
subset of its parent API token's, ``auth.token_scopes.grant``). Like API tokens, only its
SHA-256 is stored (table ``registry_tokens``).

Why opaque and stored rather than a signed JWT: revoking or expiring the parent API token
ends its registry tokens at once (the check joins the parent row), several hub processes
sharing one database need no shared signing key, and a leaked database yields no usable
token. The cost is one indexed read per request, the same as an API token's.

:data:`ANONYMOUS_TOKEN` is what a client without credentials receives: it stands for the
anonymous caller (public repositories only) and is stored nowhere.

Errors: ``Unauthorized`` (``malformed``, ``unknown``, ``revoked``, ``expired``).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.errors import Unauthorized
from hub_server.auth.models import RegistryToken, Token, utcnow
from hub_server.auth.scopes import Principal, Scope
from hub_server.auth.tokens import hash_secret

__all__ = ["ANONYMOUS_TOKEN", "REGISTRY_TOKEN_LIFETIME", "REGISTRY_TOKEN_PREFIX", "IssuedToken", "RegistryTokenService"]

REGISTRY_TOKEN_PREFIX = "fkr_"
REGISTRY_TOKEN_LIFETIME = timedelta(minutes=5)
ANONYMOUS_TOKEN = "anonymous"
_SECRET = re.compile(r"fkr_[A-Za-z0-9_-]{43}")


class IssuedToken:
    """A freshly issued token: the plaintext, its lifetime in seconds and issue time."""

    def __init__(self, token: str, expires_in: int, issued_at: datetime) -> None:
        self.token = token
        self.expires_in = expires_in
        self.issued_at = issued_at


class RegistryTokenService:
    """Issues and checks registry tokens. ``clock`` exists so tests can move time without sleeping."""

    def __init__(
        self, session_factory: async_sessionmaker[AsyncSession], *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self._sessions = session_factory
        self._clock = clock

    async def issue(self, parent: Principal, scopes: Sequence[str]) -> IssuedToken:
        """A token for ``parent`` (an authenticated API-token principal) limited to ``scopes``.

        ``scopes`` must already be limited to what ``parent`` holds (``token_scopes.grant``).
        Expired rows are deleted on the way.

        Raises:
            Unauthorized: ``parent`` is anonymous or its API token was revoked meanwhile.
        """
        now = self._clock()
        if parent.is_anonymous:
            return IssuedToken(ANONYMOUS_TOKEN, int(REGISTRY_TOKEN_LIFETIME.total_seconds()), now)
        secret = REGISTRY_TOKEN_PREFIX + secrets.token_urlsafe(32)
        async with self._sessions() as session:
            await session.exec(delete(RegistryToken).where(col(RegistryToken.expires_at) <= now))
            found = await session.exec(
                select(Token.id).where(Token.name == parent.name, col(Token.revoked_at).is_(None))
            )
            parent_id = found.first()
            if parent_id is None:
                raise Unauthorized("the token has been revoked", "revoked")
            session.add(
                RegistryToken(
                    token_hash=hash_secret(secret),
                    parent_id=parent_id,
                    scopes=json.dumps(list(scopes)),
                    expires_at=now + REGISTRY_TOKEN_LIFETIME,
                )
            )
            await session.commit()
        return IssuedToken(secret, int(REGISTRY_TOKEN_LIFETIME.total_seconds()), now)

    async def authenticate(self, secret: str) -> Principal:
        """The principal a registry token stands for: its parent's name, the scopes it was granted.

        Raises:
            Unauthorized: ``malformed``, ``unknown``, ``expired`` (the token or its parent) or
                ``revoked`` (its parent).
        """
        return (await self.authenticate_with_lifetime(secret))[0]

    async def authenticate_with_lifetime(self, secret: str) -> tuple[Principal, float | None]:
        """:meth:`authenticate`, and the seconds until the token or its parent expires (``None``: never).

        Raises: as :meth:`authenticate`.
        """
        if secret == ANONYMOUS_TOKEN:
            return Principal.anonymous(), None
        if not _SECRET.fullmatch(secret):
            raise Unauthorized("malformed registry token", "malformed")
        digest = hash_secret(secret)
        async with self._sessions() as session:
            row = (
                await session.exec(
                    select(RegistryToken, Token)
                    .join(Token, col(Token.id) == col(RegistryToken.parent_id))
                    .where(RegistryToken.token_hash == digest)
                )
            ).first()
        if row is None or not hmac.compare_digest(row[0].token_hash, digest):
            raise Unauthorized("unknown token", "unknown")
        issued, parent = row
        now = self._clock()
        if parent.revoked_at is not None:
            raise Unauthorized("the token has been revoked", "revoked")
        if issued.expires_at <= now or (parent.expires_at is not None and parent.expires_at <= now):
            raise Unauthorized("the token has expired", "expired")
        ends = issued.expires_at if parent.expires_at is None else min(issued.expires_at, parent.expires_at)
        return Principal(
            parent.name,
            tuple(Scope.parse(s) for s in json.loads(issued.scopes)),
            grantable=tuple(Scope.parse(s) for s in parent.scope_list),
        ), (ends - now).total_seconds()
