"""``create_app(settings)``: the hub's Litestar app around the services of ``compose.open_hub``.

The lifespan enters ``open_hub(settings)`` (the one composition root: engine, schema check,
store, services) and leaves what it built on ``app.state``:

    hub (HubServices), engine, sessions (async_sessionmaker), store, tokens (TokenService),
    authenticator (auth.credentials.Authenticator: API and registry tokens), audit (AuditLog),
    metrics (HubMetrics), registry (Registry), settings, session_ends (auth.web_sessions.WebSessionEnds)

It runs the webhook delivery loop (``hub_server.webhooks.delivery``) while serving.
On shutdown (SIGTERM under uvicorn) it stops the periodic GC and that loop, then ``open_hub`` closes the
store and disposes the engine. The access log and the HTTP metrics wrap the whole ASGI handler, so requests that
match no route are logged and counted too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Sequence

from litestar import Litestar, Router
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.types import ControllerRouterHandler

import web
from hub_server.api import ROUTE_HANDLERS
from hub_server.api.deps import DEPENDENCIES, reject_bad_token
from hub_server.api.errors import EXCEPTION_HANDLERS, to_hub_error
from hub_server.api.fastpath import ManifestFastPath
from hub_server.api.forkd_compat import ForkdCompatController
from hub_server.api.openapi import document_errors
from hub_server.api.ratelimit import RateLimiter
from hub_server.compose import open_hub
from hub_server.db.outage import DatabaseUnavailable
from hub_server.logs import access_log_middleware
from hub_server.metrics import HubMetrics, metrics_middleware
from hub_server.outages import DATABASE, STORAGE
from hub_server.registry.service import Registry
from hub_server.registry.upkeep.gcstate import GcBusy
from hub_server.settings import Settings, load_settings
from hub_server.storage import StorageFull, StorageUnavailable

__all__ = ["create_app", "create_app_from_environment", "route_handlers"]

log = logging.getLogger(__name__)


def route_handlers() -> list[ControllerRouterHandler]:
    """Every controller the hub serves.

    Extension point: the forkd compatibility controller (``/registry.json``, ``/packs/…``, from
    ``hub_server.api.forkd_compat``) and the web catalog (``/``, ``/search``, ``/n/…``, ``/r/…``,
    ``/signin``, ``/static/…``, from ``web``) are appended here.
    """
    handlers: list[ControllerRouterHandler] = list(ROUTE_HANDLERS)
    handlers.append(ForkdCompatController)  # /registry.json and /packs/… for unmodified forkd clients
    handlers.extend(web.route_handlers())
    return handlers


def create_app(
    settings: Settings, *, extra_route_handlers: Sequence[ControllerRouterHandler] = (), freeze_gc: bool = False
) -> Litestar:
    """Build the hub's ASGI app for ``settings`` (nothing is opened until the lifespan starts).

    ``freeze_gc`` (what ``forkd-hub serve`` passes): once started, move every object alive to
    the collector's permanent generation (``gc.freeze``). The app, its routes, schemas and
    SQLAlchemy's mappers are hundreds of thousands of objects that live as long as the process;
    without this, each full collection walks them all (a 263 ms pause under load in one probe,
    docs/benchmarks.md), stalling every request on that worker. Leave it off where many apps
    come and go in one process (tests).

    With ``settings.mirror_of``: the app of a read-only pull-through mirror of that hub instead
    (``hub_server.mirror.app``, docs/mirrors.md).
    """
    if settings.mirror_of is not None:  # a read-only pull-through mirror of another hub: no registry of its own
        from hub_server.mirror.app import create_mirror_app

        return create_mirror_app(settings)
    metrics = HubMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with open_hub(settings, metrics=metrics) as hub:
            app.state.update(
                hub=hub,
                engine=hub.engine,
                sessions=hub.sessions,
                store=hub.store,
                tokens=hub.tokens,
                authenticator=hub.authenticator,
                audit=hub.audit,
                metrics=hub.metrics,
                registry=hub.registry,
                settings=settings,
                session_ends=hub.session_ends,
            )
            if freeze_gc:
                gc.collect()
                gc.freeze()
            async with _periodic_gc(hub.registry, settings.gc_interval), hub.deliverer.running():
                yield

    app = Litestar(
        route_handlers=[*route_handlers(), *extra_route_handlers],
        dependencies=DEPENDENCIES,
        # an unknown URL: an HTML page for a browser, the error envelope for an API client (and always under /v2, /api)
        exception_handlers={Exception: web.browser_aware(EXCEPTION_HANDLERS[Exception], ("/v2", "/api/"))},
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(
            title="forkd-hub",
            version="1",
            description="Registry and hub for microVM snapshots. Semantics: docs/http-api.md.",
            path="/schema",
            render_plugins=[web.openapi_render_plugin()],  # packaged Swagger UI assets, no CDN
            components=Components(
                security_schemes={
                    "bearer": SecurityScheme(
                        type="http",
                        scheme="bearer",
                        description="A hub token (`forkd-hub token create`), sent as `Authorization: Bearer fkd_…`.",
                    )
                }
            ),
            openapi_router=Router("/schema", route_handlers=[], guards=[reject_bad_token]),
            security=[{"bearer": []}],
        ),
        template_config=web.template_config(),
        logging_config=None,  # hub_server.logs configures logging (JSON lines) in the CLI
    )
    document_errors(app)  # every API operation lists the error envelope per status, from the error table
    app.state.error_mapper = to_hub_error  # the web catalog's error pages map through it too (web/errors.py)
    # Wrap the whole handler (not per route) so unmatched routes are logged and counted as well.
    # Cached manifest GETs are answered in front of Litestar, inside the log and the metrics.
    fast_path = ManifestFastPath(app.asgi_handler, app.state)
    app.state.manifest_fast_path = fast_path
    # Rate limits (docs/limits.md) before anything else costs: a refusal is still logged and counted.
    limiter = RateLimiter(fast_path, settings)
    app.state.rate_limiter = limiter
    app.asgi_handler = access_log_middleware(metrics_middleware(metrics)(limiter))
    return app


def create_app_from_environment() -> Litestar:
    """The app for another ASGI server than ``forkd-hub serve`` (``granian --factory
    hub_server.app:create_app_from_environment``): settings from the ``FORKD_HUB_*`` variables,
    JSON log lines on stderr as ``serve`` writes them. The schema must already be current.

    Raises: SettingsError.
    """
    from hub_server.logs import configure_logging

    settings = load_settings()
    configure_logging(settings.log_level.upper())
    return create_app(settings, freeze_gc=True)


@contextlib.asynccontextmanager
async def _periodic_gc(registry: Registry, interval: float | None) -> AsyncIterator[None]:
    if not interval:
        yield
        return

    async def loop() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await registry.gc.run()
            except GcBusy as e:
                log.info("periodic garbage collection skipped: %s", e)
            except DatabaseUnavailable as e:  # logged once per outage (hub_server/outages.py); next interval retries
                registry.ctx.outages.failed(DATABASE, e.reason)
            except (StorageUnavailable, StorageFull) as e:
                registry.ctx.outages.failed(STORAGE, str(e))
            except Exception:  # noqa: BLE001 - a failed run is logged and retried next interval
                log.exception("periodic garbage collection failed")

    task = asyncio.create_task(loop(), name="forkd-hub-gc")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
