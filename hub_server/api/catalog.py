"""The catalog: ``/api/v1/namespaces``, ``/api/v1/repositories`` and ``/api/v1/repositories/{ns}/{repo}``."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, get, patch
from litestar.di import NamedDependency
from litestar.params import QueryParameter, RawBody

from hub_server.api.deps import PULL, PUSH, decode_json_body, json_body, remote_of
from hub_server.api.schemas import NamespacesOut, RepositoriesOut, RepositoryOut, RepositoryPatch
from hub_server.api.tags import next_link
from hub_server.auth.scopes import Principal
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.service import Registry

PageSize = Annotated[int | None, QueryParameter(ge=1)]
Cursor = Annotated[str | None, QueryParameter()]


class CatalogController(Controller):
    path = "/api/v1"
    tags = ["catalog"]

    @get("/namespaces", summary="Namespaces with a repository the caller can see")
    async def namespaces(
        self,
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        n: PageSize = None,
        last: Cursor = None,
    ) -> Response[NamespacesOut]:
        page = await registry.catalog.namespaces(principal, n, last)
        return Response(
            NamespacesOut(namespaces=page.items), headers=next_link("/api/v1/namespaces", n, page.next_last)
        )

    @get("/repositories", summary="Repositories the caller can see (search by name or description)")
    async def repositories(
        self,
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        namespace: Cursor = None,
        q: Cursor = None,
        n: PageSize = None,
        last: Cursor = None,
    ) -> Response[RepositoriesOut]:
        page = await registry.catalog.repositories(principal, namespace=namespace, q=q, n=n, last=last)
        return Response(
            RepositoriesOut.from_page(page),
            headers=next_link("/api/v1/repositories", n, page.next_last, namespace=namespace, q=q),
        )

    @get("/repositories/{ns:str}/{repo:str}", summary="One repository and its tags", dependencies=PULL)
    async def repository(
        self, repository: NamedDependency[RepositoryScope], registry: NamedDependency[Registry]
    ) -> RepositoryOut:
        return RepositoryOut.from_detail(await registry.catalog.repository(repository))

    @patch(
        "/repositories/{ns:str}/{repo:str}",
        summary="Change visibility, description or README (push or admin), or the tag policies (admin)",
        operation_class=json_body(RepositoryPatch, "the fields to change"),
        dependencies=PUSH,
    )
    async def update(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        body: RawBody,
        request: Request[Any, Any, Any],
    ) -> RepositoryOut:
        change = decode_json_body(body, RepositoryPatch, "repository change")  # the caller is authorized
        detail = await registry.catalog.update(
            repository,
            public=change.public,
            description=change.description,
            readme=change.readme,
            policy=change.policy_change(),
            remote=remote_of(request),
        )
        return RepositoryOut.from_detail(detail)
