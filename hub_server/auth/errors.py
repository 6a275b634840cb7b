"""The auth package's error vocabulary.

The HTTP layer maps :class:`Unauthorized` to 401 ``UNAUTHORIZED`` and :class:`Forbidden`
to 403 ``DENIED``; the rest are raised by token management (CLI, admin routes) and
subclass the stdlib exception that means the same thing::

    AuthError(Exception)                          anything the auth package raises
    ├── Unauthorized                              no usable credentials: malformed header,
    │                                             unknown, revoked or expired token
    ├── Forbidden                                 valid credentials without the needed scope
    ├── InvalidScope(ValueError)                  a scope string that does not parse
    ├── InvalidTokenName(ValueError)              a token name outside [A-Za-z0-9_.-]{1,64}
    ├── InvalidDuration(ValueError)               an expiry such as "30x" or "0d"
    ├── TokenExists                               an unrevoked token already has that name
    └── TokenNotFound(LookupError)                no unrevoked token has that name
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "AuthError",
    "Forbidden",
    "InvalidDuration",
    "InvalidScope",
    "InvalidTokenName",
    "TokenExists",
    "TokenNotFound",
    "Unauthorized",
    "UnauthorizedReason",
]

#: Why credentials were rejected; safe to show to the client (says nothing about other tokens).
#: ``insufficient_scope``: a valid registry token that needs another scope, answered 401 where the clients
#: that get there only ask the token endpoint again after a 401 (a mount whose token cannot read its source).
UnauthorizedReason = Literal["required", "malformed", "unknown", "revoked", "expired", "insufficient_scope"]


class AuthError(Exception):
    """Base class of every error raised by ``hub_server.auth``."""


class Unauthorized(AuthError):
    """The request carries no usable credentials; ``reason`` names the category.

    ``scope`` is the Docker token scope the client should ask the token endpoint for
    (``repository:acme/app:pull``), when the refusal is about one repository.
    """

    def __init__(self, message: str, reason: UnauthorizedReason, scope: str | None = None) -> None:
        self.reason: UnauthorizedReason = reason
        self.scope = scope
        super().__init__(message)


class Forbidden(AuthError):
    """The credentials are valid but lack the scope for ``action`` on ``repository``.

    ``scope`` is set when a new registry token could carry it (``insufficient_scope``), and for every
    registry token refused on a repository (its API token lacking the scope too): the answer then
    challenges the client to ask the token endpoint for that Docker scope (which grants it only when
    it could; docs/http-api.md "Tokens and scopes").
    """

    def __init__(self, message: str, action: str = "", repository: str | None = None, scope: str | None = None) -> None:
        self.action = action
        self.repository = repository
        self.scope = scope
        super().__init__(message)


class InvalidScope(AuthError, ValueError):
    """``scope`` is not ``pull:PATTERN``, ``push:PATTERN``, ``delete:PATTERN`` or ``admin``."""

    def __init__(self, scope: str, reason: str) -> None:
        self.scope = scope
        self.reason = reason
        super().__init__(f"invalid scope {scope!r}: {reason}")


class InvalidTokenName(AuthError, ValueError):
    """A token name breaks the naming rule; ``reason`` says how."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        super().__init__(f"invalid token name {name!r}: {reason}")


class InvalidDuration(AuthError, ValueError):
    """An expiry duration that is not ``<n>d|h|m|s`` (n > 0) or ``never``."""

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        super().__init__(f"invalid duration {text!r}: {reason}")


class TokenExists(AuthError):
    """An unrevoked token named ``name`` already exists (revoke it first)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"a token named {name!r} already exists (revoke it first to reuse the name)")


class TokenNotFound(AuthError, LookupError):
    """No unrevoked token is named ``name``."""

    def __init__(self, name: str, reason: str = "no such token") -> None:
        self.name = name
        super().__init__(f"token {name!r}: {reason}")
