"""Native dedup endpoints (format v2, registry/push/packs.py):

- ``POST /api/v1/repositories/{ns}/{repo}/frames/query``: which zstd frames the hub already holds
  where the caller may read them;
- ``PUT /api/v1/repositories/{ns}/{repo}/blobs/uploads/{uuid}/recipe``: declare the recipe of the
  data blob whose new frames the (still empty) session will hold, so each PATCH verifies the
  frames it carries (registry/push/upload_verify.py);
- ``POST /api/v1/repositories/{ns}/{repo}/blobs/uploads/{uuid}/recipe``: finish an upload
  session holding a data blob's new frames, with the blob's recipe.
"""

from __future__ import annotations

import json
from typing import Any

from litestar import Controller, Request, Response, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, RawBody

from hub_server.api.deps import NEGOTIATE, PUSH, decode_json_body, json_body, read_limited
from hub_server.api.schemas import FrameQuery, FrameQueryOut
from hub_server.api.uploads import committed_headers, upload_headers
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.service import Registry
from manifest.jsontext import loads as loads_json

#: A recipe lists ~100 bytes per frame: 64 MiB covers a 16 GiB blob of 64 KiB chunks.
MAX_RECIPE_BYTES = 64 << 20


class ChunkController(Controller):
    path = "/api/v1/repositories/{ns:str}/{repo:str}"
    tags = ["chains"]

    @post(
        "/frames/query",
        summary="Frame negotiation (≤ 10,000 digests)",
        status_code=200,
        operation_class=json_body(FrameQuery, 'the frame digests to look up: {"digests": [...]}'),
        dependencies=NEGOTIATE,
    )
    async def query(
        self, repository: NamedDependency[RepositoryScope], registry: NamedDependency[Registry], body: RawBody
    ) -> FrameQueryOut:
        query = decode_json_body(body, FrameQuery, "frame query")  # the caller is authorized: see json_body
        return FrameQueryOut.from_result(await registry.chunks.query(repository, query.digests))

    @post(
        "/blobs/uploads/{uuid:str}/recipe",
        summary="Finish an upload of new frames with the data blob's recipe",
        status_code=201,
        request_max_body_size=None,
        dependencies=PUSH,
    )  # bounded in _with_recipe (413 TOO_LARGE)
    async def finish_recipe(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        uuid: FromPath[str],
        request: Request[Any, Any, Any],
    ) -> Response[None]:
        return await _with_recipe(repository, registry, uuid, request, declare=False)

    @put(
        "/blobs/uploads/{uuid:str}/recipe",
        summary="Declare the data blob's recipe before uploading its new frames (verified as they arrive)",
        status_code=202,
        request_max_body_size=None,
        dependencies=PUSH,
    )  # bounded in _with_recipe (413 TOO_LARGE)
    async def declare_recipe(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        uuid: FromPath[str],
        request: Request[Any, Any, Any],
    ) -> Response[None]:
        return await _with_recipe(repository, registry, uuid, request, declare=True)


async def _with_recipe(
    repository: RepositoryScope, registry: Registry, uuid: str, request: Request[Any, Any, Any], *, declare: bool
) -> Response[None]:
    """The one body of both recipe routes: read the recipe (≤ 64 MiB), then declare it on the session
    (202, where the session stands) or finish the session with it (201, the blob committed)."""
    recipe = _recipe(await read_limited(request, MAX_RECIPE_BYTES, "recipe"))
    if declare:
        status = await registry.uploads.declare_recipe(repository, uuid, recipe)
        return Response(b"", status_code=202, headers=upload_headers(repository.full_name, status.id, status.size))
    blob = await registry.uploads.finish_recipe(repository, uuid, recipe)
    return Response(b"", status_code=201, headers=committed_headers(repository.full_name, blob))


def _recipe(body: bytes) -> Any:
    try:
        return loads_json(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HubError(ErrorCode.BLOB_UPLOAD_INVALID, f"the recipe is not valid JSON: {e}", {}) from None
