"""Who may make, see and revoke which tokens, and whose namespace is whose: delegation, never escalation.

A user whose token can write to some repositories (``push`` or ``delete`` on a pattern) may make robot tokens
for them, as a team lead makes one for CI: a new token's every scope must be *granted* by one of the maker's
write scopes (:func:`may_grant`):

- the maker's scope allows the action: the same action, or ``pull`` (which ``push`` and ``delete`` imply);
- its pattern covers the new pattern: segment by segment, ``*`` covers anything, a literal only itself, and a
  glob a literal it matches (``acme/*`` covers ``acme/py`` and ``acme/py-*``; ``acme/py-*`` covers
  ``acme/py-numpy`` but not ``acme/*``). Sound, if conservative: nothing wider is ever granted.

``admin`` grants everything (operators); nobody else grants ``admin``. A ``pull``-only token manages nothing,
and neither does a registry token (``/v2/token``'s short-lived ones, which carry ``grantable`` scopes): tokens
are made with the API token itself. The same rule says which existing tokens a caller may see and revoke
(:func:`may_manage`: every scope of the token is one it could grant), and which namespaces are "theirs"
(:func:`writes_in`: a write scope whose namespace segment matches). Pure functions; nothing here raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hub_server.auth.scopes import Principal, Scope

__all__ = ["covers", "makes_tokens", "may_grant", "may_manage", "namespaces_of", "segment_matches", "writes_in"]

#: the actions whose holders may make tokens (within what they hold)
WRITE_ACTIONS = ("push", "delete")


def _glob(segment: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(piece) for piece in segment.split("*")))


def _segment_covers(outer: str, inner: str) -> bool:
    if outer == "*" or outer == inner:
        return True
    return "*" not in inner and _glob(outer).fullmatch(inner) is not None


def covers(outer: str, inner: str) -> bool:
    """Whether the repository pattern ``outer`` matches every name ``inner`` matches (soundly: never wider)."""
    outer_parts, inner_parts = outer.split("/"), inner.split("/")
    return len(outer_parts) == len(inner_parts) == 2 and all(
        _segment_covers(o, i) for o, i in zip(outer_parts, inner_parts, strict=True)
    )


def _manages(principal: Principal) -> bool:
    return not principal.is_anonymous and not principal.grantable  # an API token, not a registry token


def segment_matches(segment: str, name: str) -> bool:
    """Whether a pattern segment (``acme``, ``team-*``, ``*``) matches the name segment ``name``."""
    return _glob(segment).fullmatch(name) is not None


def makes_tokens(principal: Principal) -> bool:
    """Whether ``principal`` may make tokens at all (admin, or a push or delete scope; an API token)."""
    return _manages(principal) and (principal.is_admin or any(s.action in WRITE_ACTIONS for s in principal.scopes))


def may_grant(principal: Principal, wanted: Scope) -> bool:
    """Whether ``principal`` may put ``wanted`` in a token it makes (the module docstring's rule)."""
    if not _manages(principal):
        return False
    if principal.is_admin:
        return True
    if wanted.pattern is None:  # admin: only an admin grants it
        return False
    return any(
        held.action in WRITE_ACTIONS
        and held.pattern is not None
        and (held.action == wanted.action or wanted.action == "pull")
        and covers(held.pattern, wanted.pattern)
        for held in principal.scopes
    )


def may_manage(principal: Principal, scopes: Iterable[Scope | str]) -> bool:
    """Whether ``principal`` may see and revoke a token holding ``scopes``: it could grant every one of them."""
    parsed = [s if isinstance(s, Scope) else Scope.parse(s) for s in scopes]
    return bool(parsed) and all(may_grant(principal, s) for s in parsed)


def namespaces_of(scopes: Iterable[Scope | str]) -> set[str]:
    """The namespace segments of the scopes' patterns (``acme``, ``team-*``); ``*`` for admin."""
    out = set()
    for s in scopes:
        scope = s if isinstance(s, Scope) else Scope.parse(s)
        out.add("*" if scope.pattern is None else scope.pattern.split("/")[0])
    return out


def writes_in(principal: Principal, namespace: str) -> bool:
    """Whether ``principal`` may write (push or delete) to some repository of ``namespace``: it is one of theirs."""
    if not _manages(principal):
        return False
    if principal.is_admin:
        return True
    return any(
        held.action in WRITE_ACTIONS
        and held.pattern is not None
        and segment_matches(held.pattern.split("/")[0], namespace)
        for held in principal.scopes
    )
