"""Dependencies every controller may declare (explicitly, as ``NamedDependency[...]``).

``principal``: the caller, from the ``Authorization`` header (``auth.credentials``: Bearer API
or registry token, or Basic; 401 for a bad one on every route that declares it), also left in ``scope["state"]["principal"]`` for the access log.
``registry``: the :class:`~hub_server.registry.service.Registry` built by the app's lifespan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litestar import Request
from litestar.datastructures import State
from litestar.di import Provide

from hub_server.auth.credentials import Authenticator
from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.manifests import too_large
from hub_server.registry.service import Registry

__all__ = ["DEPENDENCIES", "body_stream", "read_limited", "remote_of"]


async def provide_principal(request: Request[Any, Any, Any], state: State) -> Principal:
    authenticator: Authenticator = state.authenticator
    principal = await authenticator.principal(request.headers.get("authorization"))
    request.scope["state"]["principal"] = principal
    return principal


async def provide_registry(state: State) -> Registry:
    return state.registry  # type: ignore[no-any-return]


DEPENDENCIES = {
    "principal": Provide(provide_principal),
    "registry": Provide(provide_registry),
}


def remote_of(request: Request[Any, Any, Any]) -> str | None:
    """The client address for the audit log (the proxy's, unless uvicorn trusts forwarded headers)."""
    return request.client.host if request.client else None


async def body_stream(request: Request[Any, Any, Any]) -> AsyncIterator[bytes]:
    """The request body as it arrives (never buffered whole)."""
    async for piece in request.stream():
        if piece:
            yield piece


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
    async for piece in request.stream():
        buffer += piece
        if len(buffer) > limit:
            raise too_large(what, len(buffer), limit)
    return bytes(buffer)
