"""``GET /v2/{ns}/{repo}/tags/list?n=&last=`` (paginated with ``Link``)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from litestar import Controller, Response, get
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from hub_server.api.deps import PULL
from hub_server.api.schemas import TagListOut
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.service import Registry


def next_link(path: str, n: int | None, last: str | None, **query: str | None) -> dict[str, str]:
    """A ``Link: <…>; rel="next"`` header when there is a next page."""
    if last is None:
        return {}
    params = {k: v for k, v in query.items() if v}
    if n is not None:
        params["n"] = str(n)
    params["last"] = last
    return {"Link": f'<{path}?{urlencode(params)}>; rel="next"'}


class TagController(Controller):
    path = "/v2/{ns:str}/{repo:str}/tags/list"
    tags = ["tags"]
    dependencies = PULL

    @get("/", summary="List tags")
    async def list_tags(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        n: Annotated[int | None, QueryParameter(ge=0)] = None,
        last: Annotated[str | None, QueryParameter()] = None,
    ) -> Response[TagListOut]:
        page = await registry.tags.list(repository, n, last)  # n=0: an empty list, no Link
        name = repository.full_name
        return Response(
            TagListOut(name=name, tags=page.items), headers=next_link(f"/v2/{name}/tags/list", n, page.next_last)
        )
