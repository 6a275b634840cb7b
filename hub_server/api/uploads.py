"""Blob uploads: ``/v2/{ns}/{repo}/blobs/uploads/`` (start, monolithic, mount) and ``…/{uuid}``
(PATCH append, GET status, PUT finish, DELETE cancel). Bodies are streamed to storage. Writes need push;
the status and the cancel also serve the session's opener with pull (``core/access.py``, ``upload``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from litestar import Controller, Request, Response, delete, get, patch, post, put
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter, QueryParameter

from hub_server.api.deps import PUSH, UPLOAD_SESSION, UPLOAD_START, body_stream
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.push.uploads import BlobCommitted, UploadStatus
from hub_server.registry.service import Registry

_CONTENT_RANGE = re.compile(r"(?:bytes\s+)?([0-9]+)-([0-9]+)(?:/(?:[0-9]+|\*))?")


def upload_headers(repository: str, upload_id: str, size: int) -> dict[str, str]:
    """Where the session lives and how much it holds (``Range`` is inclusive; ``Upload-Offset`` is exact)."""
    return {
        "Location": f"/v2/{repository}/blobs/uploads/{upload_id}",
        "Range": f"0-{max(size - 1, 0)}",
        "Upload-Offset": str(size),
        "Docker-Upload-UUID": upload_id,
    }


def committed_headers(repository: str, blob: BlobCommitted) -> dict[str, str]:
    return {"Location": f"/v2/{repository}/blobs/{blob.digest}", "Docker-Content-Digest": blob.digest}


def parse_content_range(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    match = _CONTENT_RANGE.fullmatch(value.strip())
    if match is None or int(match.group(2)) < int(match.group(1)):
        raise HubError(
            ErrorCode.BLOB_UPLOAD_INVALID,
            f"malformed Content-Range {value[:80]!r} (want start-end)",
            {"contentRange": value[:80]},
        )
    return int(match.group(1)), int(match.group(2))


@contextmanager
def _session_position_on_416(repository: str, upload_id: str) -> Iterator[None]:
    """A 416 for a chunk at the wrong offset tells the client where the (kept) session stands."""
    try:
        yield
    except HubError as e:
        if e.code is ErrorCode.RANGE_INVALID and "size" in e.detail:
            e.headers.update(upload_headers(repository, upload_id, e.detail["size"]))
        raise


def _respond(repository: str, result: UploadStatus | BlobCommitted) -> Response[None]:
    if isinstance(result, BlobCommitted):
        return Response(b"", status_code=201, headers=committed_headers(repository, result))
    return Response(b"", status_code=202, headers=upload_headers(repository, result.id, result.size))


class UploadController(Controller):
    path = "/v2/{ns:str}/{repo:str}/blobs/uploads"
    tags = ["blobs"]
    request_max_body_size = None  # bodies are streamed; the blob size limit is enforced while writing
    dependencies = PUSH

    @post(
        "/",
        summary="Start an upload (or upload monolithically with ?digest=, or mount with ?mount=&from=)",
        dependencies=UPLOAD_START,
    )
    async def start(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        request: Request[Any, Any, Any],
        digest: Annotated[str | None, QueryParameter()] = None,
        mount: Annotated[str | None, QueryParameter()] = None,
        mount_from: Annotated[str | None, QueryParameter(name="from")] = None,
    ) -> Response[None]:
        body = body_stream(request) if digest is not None else None
        result = await registry.uploads.start(repository, digest=digest, body=body, mount=mount, mount_from=mount_from)
        return _respond(repository.full_name, result)

    @patch("/{upload_id:str}", summary="Append to an upload", status_code=202)
    async def append(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        upload_id: FromPath[str],
        request: Request[Any, Any, Any],
        content_range: Annotated[str | None, HeaderParameter(name="content-range")] = None,
    ) -> Response[None]:
        with _session_position_on_416(repository.full_name, upload_id):
            status = await registry.uploads.append(
                repository, upload_id, body_stream(request), parse_content_range(content_range)
            )
        return _respond(repository.full_name, status)

    @get(
        "/{upload_id:str}",
        summary="Upload status (resume from the committed size): push, or pull for the session's opener",
        status_code=204,
        dependencies=UPLOAD_SESSION,
    )
    async def status(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        upload_id: FromPath[str],
    ) -> Response[None]:
        status = await registry.uploads.status(repository, upload_id)
        return Response(b"", status_code=204, headers=upload_headers(repository.full_name, upload_id, status.size))

    @put(
        "/{upload_id:str}",
        summary="Finish an upload (optionally with a last chunk at Content-Range): verify its digest and publish it",
        status_code=201,
    )
    async def finish(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        upload_id: FromPath[str],
        digest: Annotated[str, QueryParameter()],
        request: Request[Any, Any, Any],
        content_range: Annotated[str | None, HeaderParameter(name="content-range")] = None,
    ) -> Response[None]:
        with _session_position_on_416(repository.full_name, upload_id):
            blob = await registry.uploads.finish(
                repository, upload_id, digest, body_stream(request), parse_content_range(content_range)
            )
        return _respond(repository.full_name, blob)

    @delete(
        "/{upload_id:str}",
        summary="Cancel an upload: push, or pull for the session's opener",
        status_code=204,
        dependencies=UPLOAD_SESSION,
    )
    async def cancel(
        self,
        repository: NamedDependency[RepositoryScope],
        registry: NamedDependency[Registry],
        upload_id: FromPath[str],
    ) -> None:
        await registry.uploads.cancel(repository, upload_id)
