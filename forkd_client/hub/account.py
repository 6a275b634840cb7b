"""The calls about the caller's own token and the tokens it makes: ``HubClient.account()``.

``whoami`` (``GET /api/v1/me``, optionally with what the token may do to one repository: a push asks
before it builds anything), the robot tokens the caller manages (list, create, revoke), and a namespace's
audit log. A hub that predates these answers 404 ``NOT_FOUND`` (no such route): :func:`supported` tells.

Errors: the HubError family (:mod:`forkd_client.hub.errors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import Forbidden, HubError, NotFound
from .wire import json_object

if TYPE_CHECKING:
    from .client import HubClient

__all__ = ["AccountClient", "check_push", "not_found_hint", "rights", "route_missing"]

ME = "/api/v1/me"


def route_missing(error: HubError) -> bool:
    """Whether ``error`` says the hub has no such route (an older hub), not that a thing is missing."""
    return isinstance(error, NotFound) and error.code == "NOT_FOUND" and not error.detail


class AccountClient:
    def __init__(self, hub: HubClient) -> None:
        self.hub = hub

    def whoami(self, repository: str | None = None) -> dict[str, Any]:
        """``{"name", "scopes", "expiresAt", "managesTokens"}`` and, given ``repository`` (``ns/repo``),
        ``"repository": {"name", "pull", "push", "delete"}``."""
        params = {"repository": repository} if repository else None
        return json_object(self.hub._request("GET", ME, params=params), "who this token is")

    def tokens(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """The unrevoked tokens the caller may manage (those reaching ``namespace``), oldest first."""
        params = {"namespace": namespace} if namespace else None
        answer = self.hub._request("GET", "/api/v1/tokens", params=params)
        tokens = answer.json()
        if not isinstance(tokens, list):
            raise HubError("the hub's token list is not a JSON array", code="INVALID_ANSWER", status=answer.status_code)
        return [t for t in tokens if isinstance(t, dict)]

    def create_token(self, name: str, scopes: list[str], expires: str | None = None) -> dict[str, Any]:
        """Make a robot token; the answer's ``token`` is its secret (shown this once)."""
        body: dict[str, Any] = {"name": name, "scopes": scopes}
        if expires is not None:
            body["expires"] = expires
        return json_object(self.hub._request("POST", "/api/v1/tokens", json=body, ok=(201,)), f"token {name}")

    def revoke_token(self, name: str) -> dict[str, Any]:
        return json_object(self.hub._request("DELETE", f"/api/v1/tokens/{name}"), f"token {name}")

    def audit(self, namespace: str, limit: int = 50, before: int | None = None) -> dict[str, Any]:
        """``{"events": [...newest first], "nextBefore": id or null}``."""
        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before
        return json_object(
            self.hub._request("GET", f"/api/v1/namespaces/{namespace}/audit", params=params),
            f"audit log of {namespace}",
        )


def rights(hub: HubClient, repository: str) -> dict[str, Any] | None:
    """What ``hub``'s token may do to ``repository`` (``{"pull", "pullScope", "push", "delete"}``), or None when
    the hub cannot tell (anonymous, an older hub without ``/api/v1/me``, a hub that does not answer)."""
    if not hub.token:
        return None
    try:
        answer = AccountClient(hub).whoami(repository)
    except HubError:
        return None
    found = answer.get("repository")
    return (
        {**found, "token": answer.get("name"), "scopes": answer.get("scopes", [])} if isinstance(found, dict) else None
    )


def check_push(hub: HubClient, repository: str) -> None:
    """Refuse a push the hub would refuse, before anything is built or sent.

    Raises: Forbidden (the token's scopes do not include push on ``repository``). Silent when the hub cannot
    tell (the push then meets the hub's own answer)."""
    can = rights(hub, repository)
    if can is None or can.get("push"):
        return
    scopes = ", ".join(can["scopes"]) or "none"
    raise Forbidden(
        f"{repository}: this token ({can['token']}) may not push there (its scopes: {scopes}); nothing was built "
        f"or sent. Use a token with 'push:{repository}' or 'push:{repository.partition('/')[0]}/*'",
        code="DENIED",
        status=403,
    )


def not_found_hint(hub: HubClient, repository: str) -> str | None:
    """Why ``repository`` may look missing to this caller: anonymous, or a token without pull scope there."""
    if not hub.token:
        return f"if {repository} is private, log in first ('forkd login {hub.base_url}') with a token that may pull it"
    can = rights(hub, repository)
    if can is None or can.get("pullScope"):
        return None
    scopes = ", ".join(can["scopes"]) or "none"
    return (
        f"if {repository} is private, this token ({can['token']}) cannot see it: its scopes ({scopes}) have no "
        f"pull on it; use a token with 'pull:{repository}' or 'pull:{repository.partition('/')[0]}/*'"
    )
