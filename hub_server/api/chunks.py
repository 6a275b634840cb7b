"""``POST /api/v1/repositories/{ns}/{repo}/chunks/query``: which chunks the hub already holds."""

from __future__ import annotations

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody

from hub_server.api.schemas import ChunkQuery, ChunkQueryOut
from hub_server.auth.scopes import Principal
from hub_server.registry.service import Registry


class ChunkController(Controller):
    path = "/api/v1/repositories/{ns:str}/{repo:str}/chunks/query"
    tags = ["chains"]

    @post("/", summary="Chunk negotiation (≤ 10,000 digests)", status_code=200)
    async def query(
        self,
        ns: FromPath[str],
        repo: FromPath[str],
        data: JSONBody[ChunkQuery],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
    ) -> ChunkQueryOut:
        return ChunkQueryOut.from_result(await registry.chunks.query(principal, ns, repo, data.digests))
