"""forkd compatibility: ``GET /registry.json`` and ``GET /packs/{ns}/{repo}/{ref}.forkd-snapshot.tar.zst``.

What an unmodified ``forkd pull --hub <hub>/registry.json owner/name[@version]`` fetches. URLs in
registry.json are absolute: ``--public-url`` when set, else the base URL of the request. On a store
that presigns (S3, redirects on) a built pack is a 307 to its presigned URL.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath
from litestar.response import Redirect, Stream

from hub_server.api.deps import PULL
from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.forkd.compat import PACK_SUFFIX, ForkdCompatService
from hub_server.settings import Settings

__all__ = ["ForkdCompatController", "provide_forkd_compat"]

PACK_MEDIA_TYPE = "application/zstd"


async def provide_forkd_compat(state: State) -> ForkdCompatService:
    """One service per app (it serialises builds of the same pack), made on first use."""
    service = state.get("forkd_compat")
    if service is None:
        settings: Settings = state.settings
        service = ForkdCompatService(state.registry.ctx, settings.data_dir / "tmp")
        state.forkd_compat = service
    return service


class ForkdCompatController(Controller):
    tags = ["forkd"]
    dependencies = {"forkd": Provide(provide_forkd_compat)}

    @get("/registry.json", summary="forkd's registry.json (schema_version 1) of the public repositories")
    async def registry_json(
        self,
        request: Request[Any, Any, Any],
        state: State,
        principal: NamedDependency[Principal],  # a bad token is refused here too (401), as everywhere
        forkd: NamedDependency[ForkdCompatService],
    ) -> Response[dict[str, Any]]:
        settings: Settings = state.settings
        base = settings.public_url or str(request.base_url)
        return Response(await forkd.registry_json(base), headers={"Cache-Control": "no-cache"})

    @get(
        "/packs/{ns:str}/{repo:str}/{file:str}",
        summary="A forkd pack (v1 base, v2 chain) built from stored chunks",
        media_type=PACK_MEDIA_TYPE,
        dependencies=PULL,
    )
    async def pack(
        self,
        repository: NamedDependency[RepositoryScope],
        file: FromPath[str],
        forkd: NamedDependency[ForkdCompatService],
    ) -> Stream | Redirect:
        if not file.endswith(PACK_SUFFIX) or file == PACK_SUFFIX:
            raise HubError(
                ErrorCode.NOT_FOUND,
                f"pack file names are <tag>{PACK_SUFFIX} or @<digest>{PACK_SUFFIX}",
                {"file": file[:200]},
            )
        pack = await forkd.pack(repository, file.removesuffix(PACK_SUFFIX))
        headers = {"ETag": f'"sha256:{pack.sha256}"', "X-Checksum-Sha256": pack.sha256}
        url = await forkd.redirect_url(pack)  # on S3: the bytes come from the store
        if url is not None:
            return Redirect(url, status_code=307, headers=headers, media_type="text/plain")
        headers["Content-Length"] = str(pack.size)
        return Stream(pack.iter_bytes(), media_type=PACK_MEDIA_TYPE, headers=headers)
