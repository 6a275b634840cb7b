"""A signed-in user's own pages: the robot tokens they manage and their namespaces' audit log (issue 30).

    GET  /tokens                      the tokens the session's token may manage; a form to make one
    POST /tokens                      make one (its secret is shown on the answer, this once)
    POST /tokens/{name}/revoke        revoke one
    GET  /n/{ns}/audit?before=        a namespace's audit log, newest first (push or delete there)

The same services and rules as ``/api/v1/tokens`` and ``/api/v1/namespaces/{ns}/audit``
(``hub_server.robot_tokens``, ``registry/read/auditview.py``): never a scope wider than the session's own
token, never outliving it, all audited. Every form carries the session's CSRF token; refusals are the API's,
as pages (401 signed out, 403 out of scope).
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath
from litestar.response import Redirect
from litestar.status_codes import HTTP_303_SEE_OTHER

from hub_server.auth.errors import Forbidden
from hub_server.errors import HubError
from hub_server.robot_tokens import RobotTokens
from web.errors import HTML_EXCEPTION_HANDLERS, SECURITY_HEADERS
from web.pages import _int, _remote, _render, _session

__all__ = ["AccountPages"]

AUDIT_PAGE = 50


def _robots(state: State) -> RobotTokens:
    return state.hub.robots


class AccountPages(Controller):
    include_in_schema = False
    response_headers = SECURITY_HEADERS
    exception_handlers = HTML_EXCEPTION_HANDLERS  # type: ignore[assignment]  # as CatalogPages

    async def _tokens_page(
        self, request: Request[Any, Any, Any], state: State, *, status: int = 200, **context: Any
    ) -> Response[Any]:
        session = await _session(request, state)
        me = await _robots(state).whoami(session.principal)  # Unauthorized (a page) when signed out
        tokens = await _robots(state).list(session.principal)
        context.setdefault("made", None)
        context.setdefault("error", None)
        context.setdefault("revoked", request.query_params.get("revoked"))
        response = _render(session, state, "tokens.html", status=status, me=me, tokens=tokens, **context)
        response.headers["Cache-Control"] = "no-store"  # a new token's secret is on this page: never cached
        return response

    @get("/tokens", name="web-tokens")
    async def tokens(self, request: Request[Any, Any, Any], state: State) -> Response[Any]:
        return await self._tokens_page(request, state)

    @post("/tokens", status_code=200)
    async def create(self, request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        form = await request.form()
        session.check_csrf(form.get("csrf"))
        name = str(form.get("name") or "").strip()
        scopes = str(form.get("scopes") or "").split()
        expires = str(form.get("expires") or "").strip() or None
        try:
            made = await _robots(state).create(session.principal, name, scopes, expires, remote=_remote(request))
        except HubError as e:  # a bad name, scope or expiry: the form again, saying which
            return await self._tokens_page(request, state, status=e.status, error=e.message, form=form)
        except Forbidden as e:  # a scope wider than the session's own
            return await self._tokens_page(request, state, status=403, error=str(e), form=form)
        return await self._tokens_page(request, state, status=201, made=made)

    @post("/tokens/{name:str}/revoke", status_code=HTTP_303_SEE_OTHER)
    async def revoke(self, name: FromPath[str], request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        form = await request.form()
        session.check_csrf(form.get("csrf"))
        await _robots(state).revoke(session.principal, name, remote=_remote(request))
        return session.finish(Redirect(f"/tokens?revoked={name}", status_code=HTTP_303_SEE_OTHER))

    @get("/n/{ns:str}/audit", name="web-audit")
    async def audit(self, ns: FromPath[str], request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        page = await state.registry.audit_view.namespace(
            session.principal, ns, limit=AUDIT_PAGE, before=_int(request, "before", None)
        )
        return _render(session, state, "audit.html", namespace=ns, page=page)
