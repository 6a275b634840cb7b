"""Manifests: ``PUT``/``GET``/``HEAD``/``DELETE /v2/{ns}/{repo}/manifests/{ref}``."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, head, put
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter, QueryParameter

from hub_server.api.deps import read_limited, remote_of
from hub_server.api.schemas import DeleteOut
from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.tags import ABSENT, ANY
from hub_server.registry.service import Registry


def tag_expectation(if_match: str | None, if_none_match: str | None) -> str:
    """Where a tag PUT expects the tag to point: ``If-Match: "<digest>"``, ``If-None-Match: *`` (absent), or anywhere.

    Raises: HubError(INVALID_REQUEST) for both headers at once or a list of entity tags.
    """
    if if_match is not None and if_none_match is not None:
        raise HubError(ErrorCode.INVALID_REQUEST, "send If-Match or If-None-Match, not both", {})
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise HubError(ErrorCode.INVALID_REQUEST, "If-None-Match on a manifest PUT must be *", {})
        return ABSENT
    if if_match is None or if_match.strip() == "*":
        return ANY
    value = if_match.strip().removeprefix("W/").strip('"')
    if "," in value or not value:
        raise HubError(ErrorCode.INVALID_REQUEST, "If-Match on a manifest PUT takes one digest", {})
    return value


class ManifestController(Controller):
    path = "/v2/{ns:str}/{repo:str}/manifests/{ref:str}"
    tags = ["manifests"]

    @put(
        "/",
        summary="Push a manifest: forkd layer or chain index (verified), or any OCI image manifest or index",
        status_code=201,
        request_max_body_size=None,
    )  # bounded by the manifest limit in read_limited (413 TOO_LARGE)
    async def push(
        self,
        ns: FromPath[str],
        repo: FromPath[str],
        ref: FromPath[str],
        request: Request[Any, Any, Any],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        public: Annotated[bool, QueryParameter()] = False,
        content_type: Annotated[str | None, HeaderParameter(name="content-type")] = None,
        if_match: Annotated[str | None, HeaderParameter(name="if-match")] = None,
        if_none_match: Annotated[str | None, HeaderParameter(name="if-none-match")] = None,
    ) -> Response[None]:
        body = await read_limited(request, registry.ctx.limits.manifest_bytes, "manifest")
        result = await registry.manifests.put(
            principal,
            ns,
            repo,
            ref,
            body,
            content_type,
            public=public,
            remote=remote_of(request),
            expect_tag=tag_expectation(if_match, if_none_match),
        )
        headers = {"Location": f"/v2/{ns}/{repo}/manifests/{result.digest}", "Docker-Content-Digest": result.digest}
        if result.subject is not None:
            headers["OCI-Subject"] = result.subject
        return Response(b"", status_code=201, headers=headers)

    @get("/", summary="Fetch the exact manifest bytes pushed")
    async def fetch(
        self,
        ns: FromPath[str],
        repo: FromPath[str],
        ref: FromPath[str],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
    ) -> Response[bytes]:
        m = await registry.manifests.get(principal, ns, repo, ref)
        return Response(m.data or b"", media_type=m.media_type, headers={"Docker-Content-Digest": m.digest})

    @head("/", summary="Manifest existence, type and size")
    async def exists(
        self,
        ns: FromPath[str],
        repo: FromPath[str],
        ref: FromPath[str],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
    ) -> Response[None]:
        m = await registry.manifests.get(principal, ns, repo, ref, with_body=False)
        return Response(
            b"", media_type=m.media_type, headers={"Docker-Content-Digest": m.digest, "Content-Length": str(m.size)}
        )

    @delete("/", summary="Delete a snapshot from the repository (?cascade=true | ?force=true)", status_code=202)
    async def remove(
        self,
        ns: FromPath[str],
        repo: FromPath[str],
        ref: FromPath[str],
        request: Request[Any, Any, Any],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        cascade: Annotated[bool, QueryParameter()] = False,
        force: Annotated[bool, QueryParameter()] = False,
    ) -> DeleteOut:
        result = await registry.deletion.delete(
            principal, ns, repo, ref, cascade=cascade, force=force, remote=remote_of(request)
        )
        return DeleteOut.from_result(result)
