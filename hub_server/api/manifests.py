"""Manifests: ``PUT``/``GET``/``HEAD``/``DELETE /v2/{ns}/{repo}/manifests/{ref}``."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, head, put
from litestar.background_tasks import BackgroundTask
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, HeaderParameter, QueryParameter

from hub_server.api.deps import DELETE, MANIFEST_READ, PUSH, read_limited, remote_of
from hub_server.api.forkd_compat import provide_forkd_compat
from hub_server.api.schemas import DeleteOut
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.tags import ABSENT, ANY
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.forkd.compat import ForkdCompatService
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


async def provide_tag_expectation(
    if_match: Annotated[str | None, HeaderParameter(name="if-match")] = None,
    if_none_match: Annotated[str | None, HeaderParameter(name="if-none-match")] = None,
) -> str:
    """The ``expect_tag`` dependency of a manifest PUT (:func:`tag_expectation` of its conditional headers)."""
    return tag_expectation(if_match, if_none_match)


class ManifestController(Controller):
    path = "/v2/{ns:str}/{repo:str}/manifests/{ref:str}"
    tags = ["manifests"]

    @put(
        "/",
        summary="Push a manifest: forkd layer or chain index (verified), or any OCI image manifest or index",
        status_code=201,
        request_max_body_size=None,
        dependencies={
            **PUSH,
            "expect_tag": Provide(provide_tag_expectation),
            "forkd": Provide(provide_forkd_compat),
        },
    )  # bounded by the manifest limit in read_limited (413 TOO_LARGE)
    async def push(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        ref: FromPath[str],
        request: Request[Any, Any, Any],
        expect_tag: NamedDependency[str],
        forkd: NamedDependency[ForkdCompatService],
        public: Annotated[bool, QueryParameter()] = False,
        content_type: Annotated[str | None, HeaderParameter(name="content-type")] = None,
    ) -> Response[None]:
        body = await read_limited(request, registry.ctx.limits.manifest_bytes, "manifest")
        result = await registry.manifests.put(
            repository, ref, body, content_type, public=public, remote=remote_of(request), expect_tag=expect_tag
        )
        # a forkd snapshot tagged in a public repository: its pack is built once the answer is sent, for registry.json
        build = (
            BackgroundTask(forkd.build_after_push, repository.namespace, repository.name, result.digest)
            if result.tag is not None
            else None
        )
        headers = {
            "Location": f"/v2/{repository.full_name}/manifests/{result.digest}",
            "Docker-Content-Digest": result.digest,
        }
        if result.subject is not None:
            headers["OCI-Subject"] = result.subject
        return Response(b"", status_code=201, headers=headers, background=build)

    @get("/", summary="Fetch the exact manifest bytes pushed", dependencies=MANIFEST_READ)
    async def fetch(
        self, repository: NamedDependency[RepositoryScope], registry: NamedDependency[Registry], ref: FromPath[str]
    ) -> Response[bytes]:
        m = await registry.manifest_reads.get(repository, ref)
        return Response(m.data or b"", media_type=m.media_type, headers={"Docker-Content-Digest": m.digest})

    @head("/", summary="Manifest existence, type and size", dependencies=MANIFEST_READ)
    async def exists(
        self, repository: NamedDependency[RepositoryScope], registry: NamedDependency[Registry], ref: FromPath[str]
    ) -> Response[None]:
        m = await registry.manifest_reads.get(repository, ref, with_body=False)
        return Response(
            b"", media_type=m.media_type, headers={"Docker-Content-Digest": m.digest, "Content-Length": str(m.size)}
        )

    @delete(
        "/",
        summary="Delete a snapshot from the repository (?cascade=true | ?force=true)",
        status_code=202,
        dependencies=DELETE,
    )
    async def remove(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        ref: FromPath[str],
        request: Request[Any, Any, Any],
        cascade: Annotated[bool, QueryParameter()] = False,
        force: Annotated[bool, QueryParameter()] = False,
    ) -> DeleteOut:
        result = await registry.deletion.delete(
            repository, ref, cascade=cascade, force=force, remote=remote_of(request)
        )
        return DeleteOut.from_result(result)
