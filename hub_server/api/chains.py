"""``GET /api/v1/repositories/{ns}/{repo}/chain/{ref}`` and ``…/lineage/{ref}``."""

from __future__ import annotations

from litestar import Controller, get
from litestar.di import NamedDependency
from litestar.params import FromPath

from hub_server.api.schemas import ChainOut, LineageOut
from hub_server.auth.scopes import Principal
from hub_server.registry.service import Registry


class ChainController(Controller):
    path = "/api/v1/repositories/{ns:str}/{repo:str}"
    tags = ["chains"]

    @get("/chain/{ref:str}", summary="The whole chain base → head, with exact manifest and config bytes")
    async def chain(
        self,
        ns: FromPath[str],
        repo: FromPath[str],
        ref: FromPath[str],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
    ) -> ChainOut:
        return ChainOut.from_chain(await registry.lineage.chain(principal, ns, repo, ref))

    @get("/lineage/{ref:str}", summary="Ancestors, dependents and sizes of a layer")
    async def lineage(
        self,
        ns: FromPath[str],
        repo: FromPath[str],
        ref: FromPath[str],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
    ) -> LineageOut:
        return LineageOut.from_lineage(await registry.lineage.lineage(principal, ns, repo, ref))
