"""``GET /v2/`` (OCI version check), ``GET /healthz``, ``GET /metrics``.

Each declares the principal, so a bad token is a 401 here as on every route (docs/http-api.md);
none needs a token. ``/schema`` gets the same rule from :func:`hub_server.api.deps.reject_bad_token`.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency

from hub_server.api.schemas import HealthOut
from hub_server.auth.errors import Unauthorized
from hub_server.auth.scopes import Principal
from hub_server.registry.service import Registry


class SystemController(Controller):
    tags = ["system"]

    @get("/v2", summary="OCI API version check; challenges callers without credentials")
    async def v2_root(
        self, request: Request[Any, Any, Any], principal: NamedDependency[Principal]
    ) -> Response[dict[str, Any]]:
        # Declaring the principal makes a bad token fail here with 401, as everywhere. A caller
        # without any credentials is challenged, so OCI clients learn where the token endpoint is;
        # one holding the anonymous token (it followed the challenge without credentials) is not.
        if request.headers.get("authorization") is None:
            raise Unauthorized("authentication required: see the WWW-Authenticate challenge", "required")
        return Response({}, headers={"Docker-Distribution-Api-Version": "registry/2.0"})

    @get("/healthz", summary="Database and blob store health")
    async def healthz(
        self, principal: NamedDependency[Principal], registry: NamedDependency[Registry]
    ) -> Response[HealthOut]:
        ok, report = await registry.health()
        body = HealthOut(status="ok" if ok else "unavailable", database=report["database"], storage=report["storage"])
        return Response(body, status_code=200 if ok else 503)

    @get("/metrics", summary="Prometheus metrics", media_type="text/plain")
    async def metrics(
        self, principal: NamedDependency[Principal], registry: NamedDependency[Registry]
    ) -> Response[bytes]:
        await registry.refresh_gauges()
        # How many private repositories exist is not everyone's business: admins only.
        data, content_type = registry.ctx.metrics.render(include_private=principal.is_admin)
        # Litestar appends its own charset to text/* types; hand it the type without one.
        return Response(data, media_type=content_type.split("; charset=")[0])
