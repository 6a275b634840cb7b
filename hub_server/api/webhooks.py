"""``/api/v1/namespaces/{ns}/webhooks``: manage a namespace's webhooks over HTTP (admin tokens only).

``GET`` lists them (never their secrets), ``POST`` adds one (``{"url", "secret", "events"?}``,
201 with the webhook), ``DELETE …/{id}`` removes one with its log (204), ``GET …/{id}/deliveries``
shows its delivery log. The same service as ``forkd-hub webhook`` (docs/webhooks.md); adding
and removing are audited with the token's name.

Errors: ``UNAUTHORIZED``/``DENIED`` (not an admin token), ``INVALID_REQUEST`` (bad namespace,
URL, secret, event or limit), ``NOT_FOUND`` (no webhook with that id in the namespace).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter, RawBody

from hub_server.api.deps import decode_json_body, json_body, remote_of
from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.webhooks.service import WebhookService

__all__ = ["WebhookController", "WebhookIn"]


class WebhookIn(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    url: str
    secret: str
    events: list[str] | None = None


def _service(state: State) -> WebhookService:
    return state.hub.webhooks


class WebhookController(Controller):
    path = "/api/v1/namespaces/{ns:str}/webhooks"
    tags = ["webhooks"]

    @get("/", summary="List a namespace's webhooks (admin)")
    async def list_webhooks(
        self, ns: FromPath[str], principal: NamedDependency[Principal], state: State
    ) -> list[dict[str, Any]]:
        principal.require("admin")
        return [info.to_json() for info in await _service(state).list(ns)]

    @post(
        "/",
        summary="Add a webhook to a namespace (admin)",
        status_code=201,
        operation_class=json_body(WebhookIn, "the webhook: url, secret and optionally events"),
    )
    async def add_webhook(
        self,
        ns: FromPath[str],
        body: RawBody,
        principal: NamedDependency[Principal],
        state: State,
        request: Request[Any, Any, Any],
    ) -> dict[str, Any]:
        principal.require("admin")
        data = decode_json_body(body, WebhookIn, "webhook")
        try:
            info = await _service(state).add(ns, data.url, data.secret, data.events)
        except ValueError as e:
            raise HubError(ErrorCode.INVALID_REQUEST, str(e), {"namespace": ns}) from None
        await state.audit.record(principal.actor, "webhook.add", remote=remote_of(request), detail=info.to_json())
        return info.to_json()

    @delete("/{webhook_id:int}", summary="Remove a webhook and its delivery log (admin)", status_code=204)
    async def remove_webhook(
        self,
        ns: FromPath[str],
        webhook_id: FromPath[int],
        principal: NamedDependency[Principal],
        state: State,
        request: Request[Any, Any, Any],
    ) -> Response[None]:
        principal.require("admin")
        info = await _service(state).in_namespace(ns, webhook_id)
        await _service(state).remove(info.id)
        await state.audit.record(principal.actor, "webhook.remove", remote=remote_of(request), detail=info.to_json())
        return Response(None, status_code=204)

    @get("/{webhook_id:int}/deliveries", summary="A webhook's delivery log, newest first (admin)")
    async def deliveries(
        self,
        ns: FromPath[str],
        webhook_id: FromPath[int],
        principal: NamedDependency[Principal],
        state: State,
        limit: Annotated[int, QueryParameter(ge=1, le=10_000)] = 50,
    ) -> list[dict[str, Any]]:
        principal.require("admin")
        info = await _service(state).in_namespace(ns, webhook_id)
        return await _service(state).deliveries(info.id, limit)
