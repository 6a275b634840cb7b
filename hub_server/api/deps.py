"""Dependencies every controller may declare (explicitly, as ``NamedDependency[...]``).

``principal``: the caller, from the ``Authorization`` header (``auth.credentials``: Bearer API
or registry token, or Basic; 401 for a bad one on every route that declares it), also left in ``scope["state"]["principal"]`` for the access log.
``registry``: the :class:`~hub_server.registry.service.Registry` built by the app's lifespan.
``repository``: for a route under ``{ns}/{repo}``, the caller's
:class:`~hub_server.registry.core.access.RepositoryScope`, resolved and authorized once for the access the
route declares (``dependencies=PULL``, ``PUSH``, ``DELETE``, ``NEGOTIATE``, ``MANIFEST_READ``,
``UPLOAD_START``, ``UPLOAD_SESSION`` or ``DISCOVER``) before the handler runs; the handler hands it to one
service call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi.spec import OpenAPIMediaType, Operation, RequestBody
from litestar.params import FromPath, QueryParameter

from hub_server.auth.credentials import Authenticator
from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import Access, RepositoryScope, mount_source_scope
from hub_server.registry.push.manifests import too_large
from hub_server.registry.service import Registry

__all__ = [
    "DELETE",
    "DEPENDENCIES",
    "DISCOVER",
    "MANIFEST_READ",
    "NEGOTIATE",
    "PULL",
    "PUSH",
    "UPLOAD_SESSION",
    "UPLOAD_START",
    "ClientDisconnected",
    "body_stream",
    "decode_json_body",
    "json_body",
    "read_limited",
    "reject_bad_token",
    "remote_of",
]

_Struct = TypeVar("_Struct", bound=msgspec.Struct)


async def provide_principal(request: Request[Any, Any, Any], state: State) -> Principal:
    authenticator: Authenticator = state.authenticator
    principal = await authenticator.principal(request.headers.get("authorization"))
    request.scope["state"]["principal"] = principal
    return principal


async def provide_registry(state: State) -> Registry:
    return state.registry


DEPENDENCIES = {
    "principal": Provide(provide_principal),
    "registry": Provide(provide_registry),
}


def repository_scope(access: Access, *, cached: bool = False) -> dict[str, Provide]:
    """The ``repository`` dependency of a route under ``{ns}/{repo}`` that needs ``access`` there
    (``cached``: through the read cache, for manifest reads). Raises what
    :func:`~hub_server.registry.core.access.resolve_scope` raises, before the handler runs."""

    async def provide_repository(
        ns: FromPath[str],
        repo: FromPath[str],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
    ) -> RepositoryScope:
        return await registry.scope(principal, ns, repo, access, cached=cached)

    return {"repository": Provide(provide_repository)}


#: ``dependencies=`` of a route under ``{ns}/{repo}``, by what it does there (core/access.py says who may).
PULL = repository_scope("pull")
PUSH = repository_scope("push")
DELETE = repository_scope("delete")
NEGOTIATE = repository_scope("negotiate")
MANIFEST_READ = repository_scope("pull", cached=True)
UPLOAD_SESSION = repository_scope("upload")
DISCOVER = repository_scope("discover")


async def provide_upload_start(
    ns: FromPath[str],
    repo: FromPath[str],
    principal: NamedDependency[Principal],
    registry: NamedDependency[Registry],
    mount_from: Annotated[str | None, QueryParameter(name="from", required=False)] = None,
) -> RepositoryScope:
    """The ``push`` scope of ``POST …/blobs/uploads/``; when it is a mount, a refusal's challenge also names
    the source's pull scope (as distribution's does), so the client's next token can read the source."""
    return await registry.scope(principal, ns, repo, "push", also=mount_source_scope(mount_from))


#: ``dependencies=`` of the upload start (``POST``: a mount also names its source in a challenge).
UPLOAD_START = {"repository": Provide(provide_upload_start)}


async def reject_bad_token(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """A guard for routes that do not declare the principal (the OpenAPI document): a bad
    ``Authorization`` header is a 401 there too.

    Raises: Unauthorized.
    """
    authenticator: Authenticator = connection.app.state.authenticator
    await authenticator.principal(connection.headers.get("authorization"))


def remote_of(request: Request[Any, Any, Any]) -> str | None:
    """The client address for the audit log (the proxy's, unless uvicorn trusts forwarded headers)."""
    return request.client.host if request.client else None


class ClientDisconnected(Exception):
    """The client went away before sending its whole request body (a normal event: the mapper
    logs it at INFO; an upload session keeps what was committed before, for resume)."""


async def body_stream(request: Request[Any, Any, Any]) -> AsyncIterator[bytes]:
    """The request body as it arrives (never buffered whole).

    Raises: ClientDisconnected when the client disconnects before the body's end.
    """
    while True:
        event = await request.receive()
        if event["type"] == "http.disconnect":
            raise ClientDisconnected(
                f"the client disconnected before the end of the body of {request.method} {request.url.path}"
            )
        if piece := event.get("body", b""):
            yield piece
        if not event.get("more_body", False):
            return


async def read_limited(request: Request[Any, Any, Any], limit: int, what: str) -> bytes:
    """The whole body, refusing more than ``limit`` bytes with 413 ``TOO_LARGE`` before reading it all."""
    announced = request.headers.get("content-length")
    if announced is not None:
        try:
            size = int(announced)
        except ValueError:
            raise HubError(ErrorCode.SIZE_INVALID, f"bad Content-Length {announced[:40]!r}", {}) from None
        if size > limit:
            raise too_large(what, size, limit)
    buffer = bytearray()
    async for piece in body_stream(request):
        buffer += piece
        if len(buffer) > limit:
            raise too_large(what, len(buffer), limit)
    return bytes(buffer)


def json_body(struct: type[msgspec.Struct], description: str) -> type[Operation]:
    """An OpenAPI ``operation_class`` documenting a JSON request body of type ``struct``.

    Handlers that take JSON read the raw ``body: bytes`` and decode it with
    :func:`decode_json_body` once the caller is authorized: Litestar parses a ``data``
    parameter before it resolves dependencies, so a hostile body would be parsed (and a parse
    failure answered) before authentication. This keeps the body in the OpenAPI document.
    """
    schema = msgspec.json.schema(struct)
    inline = schema["$defs"][struct.__name__]

    @dataclass
    class _WithJSONBody(Operation):
        def __post_init__(self) -> None:
            self.request_body = RequestBody(
                content={"application/json": OpenAPIMediaType(schema=inline)}, description=description, required=True
            )

    return _WithJSONBody


def decode_json_body(raw: bytes, struct: type[_Struct], what: str) -> _Struct:
    """Decode a JSON request body into ``struct``.

    Raises: HubError(INVALID_REQUEST) naming what was wrong (invalid JSON, nesting too deep,
    a field of the wrong type).
    """
    try:
        return msgspec.json.decode(raw, type=struct)
    except RecursionError:
        raise HubError(ErrorCode.INVALID_REQUEST, f"{what}: JSON is nested too deeply", {}) from None
    except msgspec.ValidationError as e:
        raise HubError(ErrorCode.INVALID_REQUEST, f"{what}: {e}", {}) from None
    except msgspec.DecodeError as e:
        raise HubError(ErrorCode.INVALID_REQUEST, f"{what} is not valid JSON: {e}", {}) from None
