"""Dependencies every controller may declare (explicitly, as ``NamedDependency[...]``).

``principal``: the caller, from the ``Authorization`` header (``auth.credentials``: Bearer API
or registry token, or Basic; 401 for a bad one on every route that declares it), also left in ``scope["state"]["principal"]`` for the access log.
``registry``: the :class:`~hub_server.registry.service.Registry` built by the app's lifespan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.handlers.base import BaseRouteHandler
from litestar.openapi.spec import OpenAPIMediaType, Operation, RequestBody
from litestar.params import FromPath

from hub_server.auth.credentials import Authenticator
from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.push.manifests import too_large
from hub_server.registry.service import Registry

__all__ = [
    "DEPENDENCIES",
    "DIGEST_ROUTE",
    "ClientDisconnected",
    "DigestRoute",
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


@dataclass(frozen=True)
class DigestRoute:
    """What every ``/v2/{ns}/{repo}/<kind>/{digest}`` handler starts from: the caller, the registry and
    the path's repository and digest (declared once, as the ``route`` dependency, not in every handler)."""

    principal: Principal
    registry: Registry
    ns: str
    repo: str
    digest: str


async def provide_digest_route(
    ns: FromPath[str],
    repo: FromPath[str],
    digest: FromPath[str],
    principal: NamedDependency[Principal],
    registry: NamedDependency[Registry],
) -> DigestRoute:
    return DigestRoute(principal, registry, ns, repo, digest)


#: For a controller whose path ends in ``{ns}/{repo}/<kind>/{digest}``: ``dependencies = DIGEST_ROUTE``.
DIGEST_ROUTE = {"route": Provide(provide_digest_route)}


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
