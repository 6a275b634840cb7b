"""``GET /api/v1/repositories/{ns}/{repo}/chain/{ref}`` and ``…/lineage/{ref}``."""

from __future__ import annotations

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromPath

from hub_server.api.deps import PULL
from hub_server.api.schemas import ChainOut, LineageOut
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.service import Registry


class ChainController(Controller):
    path = "/api/v1/repositories/{ns:str}/{repo:str}"
    tags = ["chains"]
    dependencies = PULL

    @get("/chain/{ref:str}", summary="The whole chain base → head, with exact manifest and config bytes")
    async def chain(
        self, repository: NamedDependency[RepositoryScope], registry: NamedDependency[Registry], ref: FromPath[str]
    ) -> ChainOut:
        return ChainOut.from_chain(await registry.lineage.chain(repository, ref))

    @get("/lineage/{ref:str}", summary="Ancestors, dependents and sizes of a layer")
    async def lineage(
        self, repository: NamedDependency[RepositoryScope], registry: NamedDependency[Registry], ref: FromPath[str]
    ) -> LineageOut:
        return LineageOut.from_lineage(await registry.lineage.lineage(repository, ref))
