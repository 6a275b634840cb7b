"""Robot tokens a user makes for their own namespaces: list, create (shown once), revoke; audited.

What ``forkd-hub token`` does for an operator, the API (``/api/v1/tokens``), ``forkd token`` and the web
catalog's namespace page do for a signed-in user, within :mod:`hub_server.auth.delegation`'s rule: every
scope of a new token is one the caller's own token could grant (push or delete on a covering pattern), it
expires no later than the caller's own token (and by default in :data:`DEFAULT_EXPIRY`), and a caller sees
and revokes only tokens it could have made. A token the caller may not manage is "not found", exactly like a
missing one. Creating and revoking are recorded in the audit log (``token.create``, ``token.revoke``, actor: the
caller's token), with the namespaces the token reaches (``detail.namespaces``), which is how a namespace's
audit view finds them (``registry/read/auditview.py``).

Errors: ``HubError`` — ``INVALID_REQUEST`` (a bad name, scope or expiry, or a name in use, ``detail.field``
naming it), ``NOT_FOUND`` (no such token the caller manages); ``auth.errors.Unauthorized`` (anonymous) and
``Forbidden`` (a scope the caller cannot grant, or a caller that manages no tokens).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime

from hub_server.audit import AuditLog
from hub_server.auth.delegation import makes_tokens, may_grant, may_manage, namespaces_of, segment_matches
from hub_server.auth.errors import (
    Forbidden,
    InvalidDuration,
    InvalidScope,
    InvalidTokenName,
    TokenExists,
    TokenNotFound,
    Unauthorized,
)
from hub_server.auth.models import utcnow
from hub_server.auth.scopes import Principal, Scope
from hub_server.auth.tokens import TokenInfo, TokenService, parse_duration
from hub_server.errors import ErrorCode, HubError

__all__ = ["DEFAULT_EXPIRY", "CreatedToken", "RobotTokens", "Whoami"]

DEFAULT_EXPIRY = "90d"


@dataclass(frozen=True)
class CreatedToken:
    secret: str
    """The token itself: returned this once, never stored."""
    info: TokenInfo


@dataclass(frozen=True)
class Whoami:
    """The caller as the hub sees it: its token's name, scopes and expiry, and whether it makes tokens."""

    name: str | None
    scopes: list[str]
    expires_at: datetime | None
    manages_tokens: bool

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "scopes": self.scopes,
            "expiresAt": None if self.expires_at is None else self.expires_at.isoformat(),
            "managesTokens": self.manages_tokens,
        }


class RobotTokens:
    """Token management on behalf of a caller (the module docstring's rules)."""

    def __init__(self, tokens: TokenService, audit: AuditLog) -> None:
        self.tokens = tokens
        self.audit = audit

    async def whoami(self, principal: Principal) -> Whoami:
        """The caller's token. Raises Unauthorized (anonymous)."""
        if principal.is_anonymous:
            raise Unauthorized("authentication required: this says who a token is", "required")
        expires = await self._expiry(principal)
        return Whoami(principal.name, [str(s) for s in principal.scopes], expires, makes_tokens(principal))

    async def list(self, principal: Principal, namespace: str | None = None) -> builtins.list[TokenInfo]:
        """Unrevoked tokens the caller may manage (optionally those reaching ``namespace``), oldest first.
        Raises Unauthorized (anonymous)."""
        if principal.is_anonymous:
            raise Unauthorized("authentication required to list tokens", "required")
        out = []
        for info in await self.tokens.list():
            if info.revoked_at is not None or not may_manage(principal, info.scopes):
                continue
            if namespace is not None and not any(segment_matches(n, namespace) for n in namespaces_of(info.scopes)):
                continue
            out.append(info)
        return out

    async def create(
        self,
        principal: Principal,
        name: str,
        scopes: builtins.list[str],
        expires: str | None,
        *,
        remote: str | None = None,
    ) -> CreatedToken:
        """Make a token for the caller (``expires``: ``30d`` … or ``never``; None: :data:`DEFAULT_EXPIRY`).

        Raises: HubError(INVALID_REQUEST), Unauthorized, Forbidden (a scope the caller cannot grant)."""
        if principal.is_anonymous:
            raise Unauthorized("authentication required to make tokens", "required")
        try:
            parsed = [Scope.parse(s) for s in scopes]
            if not parsed:
                raise InvalidScope("", "a token needs at least one scope")
        except InvalidScope as e:
            raise HubError(ErrorCode.INVALID_REQUEST, str(e), {"field": "scopes"}) from None
        for scope in parsed:
            if not may_grant(principal, scope):
                raise Forbidden(
                    f"token {principal.name!r} cannot grant {scope}: a new token's scopes must lie within the push or "
                    "delete scopes of the token that makes it",
                    scope.action,
                    scope.pattern,
                )
        try:
            expires_in = parse_duration(expires or DEFAULT_EXPIRY)
        except InvalidDuration as e:
            raise HubError(ErrorCode.INVALID_REQUEST, str(e), {"field": "expires"}) from None
        ceiling = await self._expiry(principal)  # never outlive the token that makes it
        if ceiling is not None and ceiling <= utcnow():
            raise Unauthorized("the token has expired", "expired")
        try:
            secret = await self.tokens.create(name, [str(s) for s in parsed], expires_in, not_after=ceiling)
        except (InvalidTokenName, InvalidScope, InvalidDuration) as e:
            raise HubError(ErrorCode.INVALID_REQUEST, str(e), {"field": "name"}) from None
        except TokenExists:
            raise HubError(
                ErrorCode.INVALID_REQUEST, f"a token named {name!r} exists: choose another name", {"field": "name"}
            ) from None
        info = await self.tokens.get(name)
        await self.audit.record(principal.actor, "token.create", remote=remote, detail=_detail(info))
        return CreatedToken(secret, info)

    async def revoke(self, principal: Principal, name: str, *, remote: str | None = None) -> TokenInfo:
        """Revoke a token the caller manages. Raises: HubError(NOT_FOUND), Unauthorized."""
        if principal.is_anonymous:
            raise Unauthorized("authentication required to revoke tokens", "required")
        try:
            info = await self.tokens.get(name)
        except TokenNotFound:
            info = None
        if info is None or not may_manage(principal, info.scopes):
            raise HubError(ErrorCode.NOT_FOUND, f"no token named {name!r} that you manage", {"name": name[:64]})
        revoked = await self.tokens.revoke(name)
        await self.audit.record(principal.actor, "token.revoke", remote=remote, detail=_detail(revoked))
        return revoked

    async def _expiry(self, principal: Principal) -> datetime | None:
        if principal.name is None:
            return None
        try:
            return (await self.tokens.get(principal.name)).expires_at
        except TokenNotFound:  # an operator at the CLI (cli:USER): not a token
            return None


def _detail(info: TokenInfo) -> dict[str, object]:
    return {
        "name": info.name,
        "prefix": info.prefix,
        "scopes": list(info.scopes),
        "expires_at": None if info.expires_at is None else info.expires_at.isoformat(),
        "namespaces": sorted(namespaces_of(info.scopes)),
    }
