"""``POST /api/v1/repositories/{ns}/{repo}/chunks/query``: which chunks the hub already holds."""

from __future__ import annotations

from litestar import Controller, post
from litestar.di import NamedDependency
from litestar.params import FromPath, RawBody

from hub_server.api.deps import decode_json_body, json_body
from hub_server.api.schemas import ChunkQuery, ChunkQueryOut
from hub_server.auth.scopes import Principal
from hub_server.registry.service import Registry


class ChunkController(Controller):
    path = "/api/v1/repositories/{ns:str}/{repo:str}/chunks/query"
    tags = ["chains"]

    @post("/", summary="Chunk negotiation (≤ 10,000 digests)", status_code=200,
          operation_class=json_body(ChunkQuery, 'the chunk digests to look up: {"digests": [...]}'))
    async def query(
        self,
        ns: FromPath[str],
        repo: FromPath[str],
        body: RawBody,
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
    ) -> ChunkQueryOut:
        await registry.chunks.authorize(principal, ns, repo)
        query = decode_json_body(body, ChunkQuery, "chunk query")
        return ChunkQueryOut.from_result(await registry.chunks.query(principal, ns, repo, query.digests))
