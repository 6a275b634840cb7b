"""Docker token-auth scopes (``repository:acme/app:pull,push``) and what a token may be granted.

The ``/v2/token`` endpoint receives scopes in the Docker token format (docs/http-api.md,
"Token endpoint"); :func:`parse_token_scopes` reads them and :func:`grant` turns the ones the
caller's API token allows into our own scope strings (``pull:acme/app``), never more than the
API token holds. Unknown resource types, malformed scopes and actions the caller may not do
are dropped, not errors: the Docker spec says the token simply lacks them, and the registry
then refuses the request that needs them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hub_server.auth.scopes import Principal

__all__ = ["TokenScope", "grant", "parse_token_scopes"]

#: Our actions a Docker action asks for; ``*`` asks for everything on the repository. ``push`` is read-write, as
#: go-containerregistry (crane) reads it: it asks for ``push,pull`` to delete and gives up on a 403, so a token
#: asked for push also carries ``delete`` where the API token holds it (never where it does not: a push-only
#: API token never deletes; docs/http-api.md, "Challenge and token endpoint").
_ACTIONS = {"pull": ("pull",), "push": ("push", "delete"), "delete": ("delete",), "*": ("pull", "push", "delete")}


@dataclass(frozen=True)
class TokenScope:
    """One requested scope: ``resource_type:name:actions`` (``registry:catalog:*`` included)."""

    resource_type: str
    name: str
    actions: tuple[str, ...]


def parse_token_scopes(values: Iterable[str]) -> list[TokenScope]:
    """Every well-formed scope in ``values`` (each may hold several, separated by spaces).

    ``repository(plugin):name:actions`` is read as ``repository``; anything malformed is skipped.
    """
    out: list[TokenScope] = []
    for value in values:
        for text in value.split():
            resource_type, sep, rest = text.partition(":")
            name, sep2, actions = rest.rpartition(":")
            if not sep or not sep2 or not name:
                continue
            resource_type = resource_type.split("(", 1)[0]
            out.append(TokenScope(resource_type, name, tuple(a for a in actions.split(",") if a)))
    return out


def grant(principal: Principal, requested: Iterable[TokenScope]) -> list[str]:
    """Our scope strings for what ``principal`` may do of ``requested``, in request order, deduplicated.

    ``registry:catalog:*`` grants ``pull`` on every pattern the principal can read, so the
    catalog lists what the API token itself would.
    """
    granted: dict[str, None] = {}
    for scope in requested:
        if scope.resource_type == "registry" and scope.name == "catalog":
            for own in principal.reads_repositories:  # a node scope reads nothing: never a pull grant
                granted["pull:*/*" if own.pattern is None else f"pull:{own.pattern}"] = None
            continue
        if scope.resource_type != "repository" or not _is_repository(scope.name):
            continue
        for docker_action in scope.actions:
            for action in _ACTIONS.get(docker_action, ()):
                if principal.can(action, scope.name):  # type: ignore[arg-type]
                    granted[f"{action}:{scope.name}"] = None
    return list(granted)


def _is_repository(name: str) -> bool:
    namespace, sep, repo = name.partition("/")
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789._-")
    return bool(sep and namespace and repo and set(namespace) <= allowed and set(repo) <= allowed)
