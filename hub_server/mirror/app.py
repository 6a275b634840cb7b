"""``create_mirror_app(settings)``: the Litestar app of ``forkd-hub serve --mirror-of URL``.

``hub_server.app.create_app`` hands over to it when ``settings.mirror_of`` is set. The lifespan opens the blob
store through ``hub_server.compose.open_store`` (the one place a backend is picked), the index
(``DIR/mirror.db``) and the upstream client, and leaves the :class:`~hub_server.mirror.service.Mirror` on
``app.state.mirror``. There is no database: a mirror holds no registry of its own.

In front of the routes: ``refuse_writes`` answers every POST/PUT/PATCH/DELETE under ``/v2`` and ``/api`` (but the
token endpoint) with 405 ``UNSUPPORTED`` naming the upstream; the access log wraps everything.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, cast

from litestar import Litestar, Request, Response

from hub_server.api.errors import handle_exception
from hub_server.compose import open_store
from hub_server.logs import access_log_middleware
from hub_server.metrics import ASGIApp, Receive, Scope, Send
from hub_server.mirror.access import AccessChecks
from hub_server.mirror.cache import ObjectCache
from hub_server.mirror.errors import UpstreamRefusal
from hub_server.mirror.index import MirrorIndex
from hub_server.mirror.metrics import MirrorMetrics
from hub_server.mirror.routes import MIRROR_ROUTES, relay_refusal
from hub_server.mirror.service import Mirror
from hub_server.mirror.upstream import Upstream
from hub_server.settings import Settings

__all__ = ["INDEX_FILE", "create_mirror_app", "open_mirror", "refuse_writes"]

log = logging.getLogger(__name__)

INDEX_FILE = "mirror.db"
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Staged bytes older than this are an interrupted fill's (another worker's running fill stages younger ones).
STAGING_GRACE = timedelta(hours=1)


@contextlib.asynccontextmanager
async def open_mirror(settings: Settings) -> AsyncIterator[Mirror]:
    """The mirror's services for ``settings`` (``mirror_of`` set). Raises what ``open_store`` raises."""
    assert settings.mirror_of is not None
    async with open_store(settings) as store:
        index = MirrorIndex.open(settings.data_dir / INDEX_FILE)
        upstream = Upstream(settings.mirror_of)
        metrics = MirrorMetrics()
        try:
            # fills a crash interrupted left staged bytes (never visible, never indexed): drop the old ones
            purged = await store.purge_staging(STAGING_GRACE)
            if purged:
                log.info("removed %d staged object(s) that interrupted fills left", purged)
            cache = ObjectCache(store, index, metrics, limit_bytes=settings.mirror_cache_bytes)
            metrics.cache_bytes.set(await index.total_bytes())
            access = AccessChecks(upstream, index, metrics, ttl=settings.mirror_auth_ttl)
            yield Mirror(upstream, cache, access, index, metrics, tag_ttl=settings.mirror_tag_ttl)
        finally:
            await upstream.close()
            index.close()


def refuse_writes(app: ASGIApp, upstream: str) -> ASGIApp:
    """405 ``UNSUPPORTED`` for every write under ``/v2`` and ``/api`` (the token endpoint excepted)."""
    body = json.dumps(
        {
            "errors": [
                {
                    "code": "UNSUPPORTED",
                    "message": f"this hub is a read-only mirror of {upstream}: push to {upstream}",
                    "detail": {"upstream": upstream},
                }
            ]
        }
    ).encode()

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope.get("type") == "http"
            and scope.get("method") in _WRITES
            and (path == "/v2" or path.startswith(("/v2/", "/api/")))
            and path.rstrip("/") != "/v2/token"
        ):
            await send(
                {
                    "type": "http.response.start",
                    "status": 405,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"allow", b"GET, HEAD"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return middleware


def _handle(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    if isinstance(exc, UpstreamRefusal):
        return relay_refusal(request, exc)
    return handle_exception(request, exc)


def create_mirror_app(settings: Settings) -> Litestar:
    """The mirror's ASGI app (nothing is opened until the lifespan starts)."""
    assert settings.mirror_of is not None
    upstream = settings.mirror_of

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_mirror(settings) as mirror:
            app.state.update(mirror=mirror, settings=settings, metrics=mirror.metrics)
            log.info("mirroring %s", upstream, extra={"mirror_of": upstream})
            yield

    app = Litestar(
        route_handlers=MIRROR_ROUTES,
        exception_handlers={Exception: _handle},
        lifespan=[lifespan],
        openapi_config=None,
        logging_config=None,
    )
    app.asgi_handler = cast(Any, access_log_middleware(refuse_writes(cast(ASGIApp, app.asgi_handler), upstream)))
    return app
