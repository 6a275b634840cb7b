"""Access control: scopes and principals, API tokens, and the auth error vocabulary.

- ``scopes``: :class:`Scope` (``pull:acme/*`` …), :class:`Principal` (``can``/``require``).
- ``tokens``: :class:`TokenService` (create, list, revoke, authenticate, parse the
  ``Authorization`` header) and :func:`parse_duration`.
- ``models``: the ``tokens`` table (hashes only).
- ``errors``: ``Unauthorized`` → 401 ``UNAUTHORIZED``, ``Forbidden`` → 403 ``DENIED``, and the
  token-management errors.
"""

from hub_server.auth.errors import (
    AuthError,
    Forbidden,
    InvalidDuration,
    InvalidScope,
    InvalidTokenName,
    TokenExists,
    TokenNotFound,
    Unauthorized,
)
from hub_server.auth.scopes import Action, Principal, Scope
from hub_server.auth.tokens import TokenInfo, TokenService, parse_duration

__all__ = [
    "Action",
    "AuthError",
    "Forbidden",
    "InvalidDuration",
    "InvalidScope",
    "InvalidTokenName",
    "Principal",
    "Scope",
    "TokenExists",
    "TokenInfo",
    "TokenNotFound",
    "TokenService",
    "Unauthorized",
    "parse_duration",
]
