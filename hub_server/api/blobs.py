"""Blob reads: ``GET``/``HEAD /v2/{ns}/{repo}/blobs/{digest}``, whole or by ``Range`` (one range → 206 with
``Content-Range``; several → ``multipart/byteranges``), or a 307 to the store's presigned URL, or (a
recipe blob, for a client that accepts it) a fetch plan of presigned pack ranges (registry/content/blobplan.py)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, head
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter
from litestar.response import Redirect, Stream

from hub_server.api.deps import DELETE, PULL, remote_of
from hub_server.api.ranges import multipart_body, multipart_length, new_boundary, parse_range
from hub_server.registry.content.blobplan import BLOB_PLAN, wants_plan
from hub_server.registry.content.blobs import BlobRead
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.service import Registry

OCTETS = "application/octet-stream"


def _headers(blob: BlobRead) -> dict[str, str]:
    return {"Docker-Content-Digest": blob.digest, "ETag": f'"{blob.digest}"', "Accept-Ranges": "bytes"}


class BlobController(Controller):
    path = "/v2/{ns:str}/{repo:str}/blobs/{digest:str}"
    tags = ["blobs"]

    @get("/", summary="Download a blob (Range supported)", dependencies=PULL)
    async def download(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        digest: FromPath[str],
        range_header: Annotated[str | None, HeaderParameter(name="range")] = None,
        accept: Annotated[str | None, HeaderParameter(name="accept")] = None,
    ) -> Response[Any] | Stream | Redirect:
        blob = await registry.blobs.read(repository, digest, redirect=True)
        if blob.redirect_url is not None:
            return Redirect(blob.redirect_url, status_code=307)
        headers = _headers(blob)
        if blob.plannable and wants_plan(accept):
            ranges = (
                [(0, blob.size - 1)]
                if range_header is None
                else parse_range(range_header, blob.size, registry.ctx.limits.ranges_per_request)
            )
            return Response(await blob.plan(ranges), media_type=BLOB_PLAN, headers={**headers, "Vary": "Accept"})
        if range_header is None:
            headers["Content-Length"] = str(blob.size)
            return Stream(blob.iter_range(), media_type=OCTETS, headers=headers)
        ranges = parse_range(range_header, blob.size, registry.ctx.limits.ranges_per_request)
        if len(ranges) == 1:
            first, last = ranges[0]
            headers["Content-Range"] = f"bytes {first}-{last}/{blob.size}"
            headers["Content-Length"] = str(last - first + 1)
            return Stream(blob.iter_range(first, last - first + 1), status_code=206, media_type=OCTETS, headers=headers)
        boundary = new_boundary()
        headers["Content-Length"] = str(multipart_length(boundary, OCTETS, ranges, blob.size))
        return Stream(
            multipart_body(boundary, OCTETS, ranges, blob.size, blob.iter_range),
            status_code=206,
            media_type=f"multipart/byteranges; boundary={boundary}",
            headers=headers,
        )

    @head("/", summary="Blob existence and size", dependencies=PULL)
    async def exists(
        self, repository: NamedDependency[RepositoryScope], registry: NamedDependency[Registry], digest: FromPath[str]
    ) -> Response[None]:
        blob = await registry.blobs.read(repository, digest)
        # HEAD: Litestar sends no body and keeps our Content-Length (the blob's size).
        return Response(b"", media_type=OCTETS, headers={**_headers(blob), "Content-Length": str(blob.size)})

    @delete(
        "/",
        summary="Remove the blob from this repository (its bytes go in GC when nothing references them)",
        status_code=202,
        dependencies=DELETE,
    )
    async def remove(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        digest: FromPath[str],
        request: Request[Any, Any, Any],
    ) -> Response[None]:
        await registry.blob_links.unlink(repository, digest, remote=remote_of(request))
        return Response(b"", status_code=202, headers={"Docker-Content-Digest": digest})
