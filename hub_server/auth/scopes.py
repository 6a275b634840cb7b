"""Scopes and principals: who is calling, and what they may do.

A scope is ``pull:PATTERN``, ``push:PATTERN``, ``delete:PATTERN``, ``node:PATTERN`` or ``admin``. PATTERN is a
glob over a repository name ``namespace/repo``: it has exactly one ``/`` and only the
characters ``[a-z0-9._*/-]``; ``*`` matches any run of characters *within* one segment (never
a ``/``), and ``**`` is just two ``*`` (nothing recursive: names have one ``/`` anyway).
So ``acme/*`` matches ``acme/py-base`` but not ``acme-x/y``, and ``*/*`` matches every
repository.

Implication: ``push`` and ``delete`` imply ``pull`` on the same pattern; ``admin`` implies
everything (every action on every repository, plus token and visibility management).

``node`` is a fleet host's scope (docs/placement.md): it reports the host's inventory (the layers of
repositories matching PATTERN it holds, as the host named like the token) and asks for placements
in those repositories. It implies nothing else: a node token never reads or pushes content.

A :class:`Principal` is the authenticated caller: a token name (``None`` when anonymous)
and its scopes. :meth:`Principal.can` answers yes/no; :meth:`Principal.require` raises
the error the HTTP layer maps to the wire (401 for anonymous, 403 for a valid token).
Whether an *anonymous* caller may read a *public* repository is the registry's decision,
not a scope: anonymous principals hold no scopes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from hub_server.auth.errors import Forbidden, InvalidScope, Unauthorized

__all__ = ["Action", "Principal", "Scope", "repository_scope"]

Action = Literal["pull", "push", "delete", "node", "admin"]
_PATTERN_ACTIONS = ("pull", "push", "delete", "node")
_IMPLIES_PULL = ("push", "delete")
_PATTERN_CHARS = re.compile(r"[a-z0-9._*/-]+")


def _check(text: str) -> tuple[Action, str | None]:
    """Validate a scope string; return its action and pattern. Raises ``InvalidScope``."""
    if not isinstance(text, str):
        raise InvalidScope(repr(text), "a scope is a string")
    if text == "admin":
        return "admin", None
    action, sep, pattern = text.partition(":")
    if action == "admin":
        raise InvalidScope(text, "'admin' takes no pattern")
    if action not in _PATTERN_ACTIONS:
        raise InvalidScope(text, "the action must be one of pull, push, delete, node or admin")
    if not sep or not pattern:
        raise InvalidScope(text, f"'{action}' needs a pattern such as '{action}:acme/*'")
    if not _PATTERN_CHARS.fullmatch(pattern):
        raise InvalidScope(text, "a pattern may only contain a-z, 0-9, '.', '_', '-', '*' and '/'")
    if pattern.count("/") != 1:
        raise InvalidScope(text, "a pattern is NAMESPACE/REPO with exactly one '/'")
    if any(not segment for segment in pattern.split("/")):
        raise InvalidScope(text, "neither side of the '/' may be empty")
    return action, pattern  # type: ignore[return-value]


#: The Docker token-scope actions a client asks for to do one of our actions (a push also reads).
_TOKEN_ACTIONS = {"pull": "pull", "push": "pull,push", "delete": "delete", "node": "pull", "admin": "*"}


def repository_scope(repository: str, action: Action) -> str:
    """The Docker token scope (``repository:acme/app:pull,push``) a 401 challenge names for ``action``."""
    return f"repository:{repository}:{_TOKEN_ACTIONS[action]}"


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str) -> re.Pattern[str]:
    # Built by hand rather than with fnmatch: fnmatch's '*' crosses '/', and '[' / '?' are
    # not part of our language (they are rejected before we get here anyway).
    parts = (re.escape(piece) for piece in pattern.split("*"))
    return re.compile("[^/]*".join(parts))


@dataclass(frozen=True)
class Scope:
    """One permission: ``action`` on repositories matching ``pattern`` (``None`` for admin)."""

    action: Action
    pattern: str | None = None

    @classmethod
    def parse(cls, text: str) -> Scope:
        """Parse ``pull:PATTERN``, ``push:PATTERN``, ``delete:PATTERN``, ``node:PATTERN`` or ``admin``.

        Raises:
            InvalidScope: unknown action, missing or extra pattern, a pattern with characters
                outside ``[a-z0-9._*/-]``, without exactly one ``/``, or with an empty segment.
        """
        return cls(*_check(text))

    def __post_init__(self) -> None:
        # Direct construction is as strict as parse(): a Scope object is always valid.
        if _check(str(self)) != (self.action, self.pattern):
            raise InvalidScope(str(self), "action and pattern do not form a scope")

    def __str__(self) -> str:
        return self.action if self.pattern is None else f"{self.action}:{self.pattern}"

    def matches(self, repository: str) -> bool:
        """Whether ``repository`` (``namespace/repo``) matches this scope's pattern (admin: all)."""
        if self.pattern is None:
            return True
        return _compile(self.pattern).fullmatch(repository) is not None

    def grants(self, action: Action, repository: str) -> bool:
        """Whether this scope alone allows ``action`` on ``repository``, implications included."""
        if self.action == "admin":
            return True
        if action == "admin" or not self.matches(repository):
            return False
        return action == self.action or (action == "pull" and self.action in _IMPLIES_PULL)


@dataclass(frozen=True)
class Principal:
    """The caller: a token name (``None`` when anonymous) and the scopes it holds."""

    name: str | None
    scopes: tuple[Scope, ...] = ()
    grantable: tuple[Scope, ...] = ()
    """For a registry token (``/v2/token``): its API token's scopes, which a new token could carry.
    A request those allow but ``scopes`` do not is refused with 403 and a challenge for that scope
    (``error="insufficient_scope"``, RFC 6750), so the client asks the token endpoint again."""

    @classmethod
    def anonymous(cls) -> Principal:
        """A caller without credentials: no name, no scopes."""
        return cls(None, ())

    @classmethod
    def with_scopes(cls, name: str, scopes: Iterable[str]) -> Principal:
        """A named principal from scope strings. Raises ``InvalidScope`` on a bad one."""
        return cls(name, tuple(Scope.parse(s) for s in scopes))

    @property
    def is_anonymous(self) -> bool:
        return self.name is None

    @property
    def is_admin(self) -> bool:
        return any(scope.action == "admin" for scope in self.scopes)

    @property
    def reads_repositories(self) -> tuple[Scope, ...]:
        """The scopes that grant ``pull`` somewhere (``node`` scopes do not): what a registry token for the
        catalog may carry."""
        return tuple(scope for scope in self.scopes if scope.action != "node")

    @property
    def actor(self) -> str:
        """How the audit log names this caller: the token name or ``"anonymous"``."""
        return self.name if self.name is not None else "anonymous"

    def can(self, action: Action, repository: str) -> bool:
        """Whether any scope grants ``action`` on ``repository`` (``namespace/repo``)."""
        return any(scope.grants(action, repository) for scope in self.scopes)

    def could(self, action: Action, repository: str) -> bool:
        """Whether a registry token re-issued for this caller could do what it cannot now."""
        return any(scope.grants(action, repository) for scope in self.grantable)

    def insufficient_scope(self, action: Action, repository: str) -> Forbidden:
        """The 403 (RFC 6750 ``insufficient_scope``, with a challenge) that sends a registry-token client
        back to the token endpoint for ``action``."""
        return Forbidden(
            f"this token's scope does not include {action} access to {repository!r}; request a token with it",
            action,
            repository,
            repository_scope(repository, action),
        )

    def require(self, action: Action, repository: str | None = None) -> None:
        """Return if :meth:`can` allows ``action`` on ``repository``, else raise what the wire needs.

        ``repository=None`` asks for the action everywhere (token or visibility management,
        GC): only ``admin`` grants that.

        Raises:
            Unauthorized: the caller is anonymous (the client should authenticate).
            Forbidden: the caller's token has no scope for this (with ``scope`` set when a new
                registry token could have it, and for any registry token: see below).
            Forbidden: the caller has a valid token without a scope for this.
        """
        allowed = self.is_admin if repository is None else self.can(action, repository)
        if allowed:
            return
        if repository is None:
            what = "admin rights" if action == "admin" else f"{action} access to every repository"
        else:
            what = f"{action} access to {repository!r}"
        if self.is_anonymous:
            scope = None if repository is None else repository_scope(repository, action)
            raise Unauthorized(f"authentication required for {what}", "required", scope)
        if repository is not None and self.could(action, repository):
            raise self.insufficient_scope(action, repository)
        # A registry token whose API token cannot have the scope either is still challenged for it (RFC 6750
        # ``insufficient_scope``): oras-py treats a 403 without a challenge as an error to retry five times
        # (131 s of backoff), but on a challenge it asks the token endpoint once, is granted less, and reports
        # the 403 at once. An API token (forkd, Basic) gets no challenge: no token endpoint could help it.
        scope = repository_scope(repository, action) if repository is not None and self.grantable else None
        raise Forbidden(f"token {self.name!r} has no scope granting {what}", action, repository, scope)
