"""A namespace's webhooks in the browser, for a session whose token is an admin's (issue 30, "webhooks").

    GET  /n/{ns}/webhooks                   the namespace's webhooks (never their secrets), their latest
                                            deliveries, a form to add one
    POST /n/{ns}/webhooks                   add one (the secret: typed, or generated and shown on the answer once)
    POST /n/{ns}/webhooks/{id}/delete       remove one with its delivery log

The rules are ``/api/v1/namespaces/{ns}/webhooks``' (``hub_server/api/webhooks.py``): admin only (a signed-out
visitor gets the 401 page, another token the 403 page), the URL, secret, events and namespace checked by
``WebhookService.add`` (a bad one: the form again, naming it, status 400), a webhook of another namespace is
404; adding and removing are audited as ``webhook.add`` / ``webhook.remove`` with the token's name. Every form
carries the session's CSRF token. The API has no test or redelivery call, so neither has this page: the
delivery log (state, attempts, last status) is what it shows.
"""

from __future__ import annotations

import secrets
from typing import Any

from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath
from litestar.response import Redirect
from litestar.status_codes import HTTP_303_SEE_OTHER

from hub_server.webhooks.payload import EVENTS
from hub_server.webhooks.service import WebhookInfo, WebhookService
from web.errors import HTML_EXCEPTION_HANDLERS, SECURITY_HEADERS
from web.pages import _remote, _render, _session

__all__ = ["WebhookPages"]

#: Deliveries shown per webhook (the newest).
RECENT_DELIVERIES = 5


def _webhooks(state: State) -> WebhookService:
    return state.hub.webhooks


class WebhookPages(Controller):
    path = "/n/{ns:str}/webhooks"
    include_in_schema = False
    response_headers = SECURITY_HEADERS
    exception_handlers = HTML_EXCEPTION_HANDLERS  # type: ignore[assignment]  # as CatalogPages

    async def _page(
        self, ns: str, request: Request[Any, Any, Any], state: State, *, status: int = 200, **context: Any
    ) -> Response[Any]:
        session = await _session(request, state)
        session.principal.require("admin")  # Unauthorized / Forbidden: the 401 / 403 page
        hooks = await _webhooks(state).list(ns)
        deliveries = {hook.id: await _webhooks(state).deliveries(hook.id, RECENT_DELIVERIES) for hook in hooks}
        context.setdefault("added", None)
        context.setdefault("secret", None)
        context.setdefault("error", None)
        context.setdefault("form", {})
        context.setdefault("removed", request.query_params.get("removed"))
        response = _render(
            session,
            state,
            "webhooks.html",
            status=status,
            namespace=ns,
            hooks=hooks,
            deliveries=deliveries,
            events=EVENTS,
            **context,
        )
        response.headers["Cache-Control"] = "no-store"  # a generated secret is on this page: never cached
        return response

    @get("/", name="web-webhooks")
    async def listing(self, ns: FromPath[str], request: Request[Any, Any, Any], state: State) -> Response[Any]:
        return await self._page(ns, request, state)

    @post("/", status_code=201)
    async def add(self, ns: FromPath[str], request: Request[Any, Any, Any], state: State) -> Response[Any]:
        session = await _session(request, state)
        form = await request.form()
        session.check_csrf(form.get("csrf"))
        session.principal.require("admin")
        url = str(form.get("url") or "").strip()
        typed = str(form.get("secret") or "")
        secret = typed or secrets.token_urlsafe(32)
        events = [str(e) for e in form.getall("events")] if "events" in form else None
        try:
            info: WebhookInfo = await _webhooks(state).add(ns, url, secret, events)
        except ValueError as e:  # a bad URL, secret, event or namespace: the form again, naming it
            kept = {"url": url, "events": events or []}
            return await self._page(ns, request, state, status=400, error=str(e), form=kept)
        await state.audit.record(session.principal.actor, "webhook.add", remote=_remote(request), detail=info.to_json())
        return await self._page(ns, request, state, status=201, added=info, secret=None if typed else secret)

    @post("/{webhook_id:int}/delete", status_code=HTTP_303_SEE_OTHER)
    async def remove(
        self, ns: FromPath[str], webhook_id: FromPath[int], request: Request[Any, Any, Any], state: State
    ) -> Response[Any]:
        session = await _session(request, state)
        form = await request.form()
        session.check_csrf(form.get("csrf"))
        session.principal.require("admin")
        info = await _webhooks(state).in_namespace(ns, webhook_id)  # HubError(NOT_FOUND): the 404 page
        await _webhooks(state).remove(info.id)
        await state.audit.record(
            session.principal.actor, "webhook.remove", remote=_remote(request), detail=info.to_json()
        )
        return session.finish(Redirect(f"/n/{ns}/webhooks?removed={info.id}", status_code=HTTP_303_SEE_OTHER))
