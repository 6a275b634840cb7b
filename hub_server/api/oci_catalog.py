"""``GET /v2/_catalog?n=&last=``: the names of the repositories the caller may read, in lexical order,
paginated with ``Link`` (the Docker registry catalog API; not part of distribution-spec 1.1)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Response, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from hub_server.api.schemas import CatalogOut
from hub_server.api.tags import next_link
from hub_server.auth.scopes import Principal
from hub_server.registry.service import Registry


class OciCatalogController(Controller):
    path = "/v2/_catalog"
    tags = ["catalog"]

    @get("/", summary="Repository names the caller may read (public ones, and private ones it may pull)")
    async def catalog(
        self,
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        n: Annotated[int | None, QueryParameter(ge=0)] = None,
        last: Annotated[str | None, QueryParameter()] = None,
    ) -> Response[CatalogOut]:
        if n == 0:
            return Response(CatalogOut(repositories=[]))
        page = await registry.catalog.repositories(principal, n=n, last=last)
        return Response(
            CatalogOut(repositories=[r.name for r in page.items]), headers=next_link("/v2/_catalog", n, page.next_last)
        )
