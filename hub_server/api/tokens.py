"""``/api/v1/me``, ``/api/v1/tokens`` and ``/api/v1/namespaces/{ns}/audit``: a user's own view of the hub.

``GET /api/v1/me`` says who the caller's token is (name, scopes, expiry, whether it may make tokens). The
tokens routes list, create (the secret is in that one answer) and revoke the robot tokens the caller may
manage, never wider than its own scopes (``hub_server.robot_tokens``); the audit route pages a namespace's
audit log for its members (``registry/read/auditview.py``). The same services serve ``forkd token``,
``forkd repo`` and the web catalog's management pages.

Errors: ``UNAUTHORIZED`` (anonymous), ``DENIED`` (a scope the caller cannot grant; an audit log that is not
theirs), ``INVALID_REQUEST`` (a bad name, scope, expiry or limit), ``NOT_FOUND`` (a token it does not manage).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter, RawBody

from hub_server.api.deps import decode_json_body, json_body, remote_of
from hub_server.auth.scopes import Principal
from hub_server.registry.read.auditview import MAX_AUDIT_PAGE
from hub_server.registry.service import Registry
from hub_server.robot_tokens import RobotTokens

__all__ = ["AccountController", "TokenIn"]


class TokenIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    scopes: list[str]
    expires: str | None = None
    """``30d``, ``12h``, ``90m``, ``3600s`` or ``never``; default 90d; never beyond the caller's own token."""


def _robots(state: State) -> RobotTokens:
    return state.hub.robots


class AccountController(Controller):
    path = "/api/v1"
    tags = ["account"]

    @get(
        "/me",
        summary="Who the caller's token is: name, scopes, expiry, whether it may make tokens; with ?repository=NS/REPO, "
        "what it may do there",
    )
    async def me(
        self,
        principal: NamedDependency[Principal],
        state: State,
        registry: NamedDependency[Registry],
        repository: Annotated[str | None, QueryParameter()] = None,
    ) -> dict[str, Any]:
        answer = (await _robots(state).whoami(principal)).to_json()
        if repository is not None:
            namespace, _, name = repository.partition("/")
            answer["repository"] = {"name": repository, **await registry.rights(principal, namespace, name)}
        return answer

    @get("/tokens", summary="The robot tokens the caller may manage (optionally those reaching one namespace)")
    async def list_tokens(
        self,
        principal: NamedDependency[Principal],
        state: State,
        namespace: Annotated[str | None, QueryParameter()] = None,
    ) -> list[dict[str, Any]]:
        return [info.to_json() for info in await _robots(state).list(principal, namespace)]

    @post(
        "/tokens",
        summary="Make a robot token within the caller's own scopes (its secret is in this answer only)",
        status_code=201,
        operation_class=json_body(TokenIn, "the token: name, scopes and optionally expires"),
    )
    async def create_token(
        self, body: RawBody, principal: NamedDependency[Principal], state: State, request: Request[Any, Any, Any]
    ) -> dict[str, Any]:
        robots = _robots(state)
        if principal.is_anonymous:  # refused before the body is read
            await robots.whoami(principal)
        data = decode_json_body(body, TokenIn, "token")
        made = await robots.create(principal, data.name, data.scopes, data.expires, remote=remote_of(request))
        return {**made.info.to_json(), "token": made.secret}

    @delete(
        "/tokens/{name:str}",
        summary="Revoke a robot token the caller manages (answers its final state)",
        status_code=200,
    )
    async def revoke_token(
        self, name: FromPath[str], principal: NamedDependency[Principal], state: State, request: Request[Any, Any, Any]
    ) -> dict[str, Any]:
        return (await _robots(state).revoke(principal, name, remote=remote_of(request))).to_json()

    @get("/namespaces/{ns:str}/audit", summary="A namespace's audit log, newest first (its members: push or delete)")
    async def namespace_audit(
        self,
        ns: FromPath[str],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_AUDIT_PAGE)] = 50,
        before: Annotated[int | None, QueryParameter(ge=1)] = None,
    ) -> dict[str, Any]:
        page = await registry.audit_view.namespace(principal, ns, limit=limit, before=before)
        return {"events": page.events, "nextBefore": page.next_before}
