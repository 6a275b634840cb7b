"""``create_app(settings)``: the one composition root of the hub.

It picks the implementations (the blob store from ``settings.storage`` through
``storage.factory.create_store``, the database from ``settings.database_url``), and wires them
into a Litestar app. The lifespan owns the resources and leaves them on ``app.state``:

    engine, sessions (async_sessionmaker), store, tokens (TokenService), audit (AuditLog),
    metrics (HubMetrics), registry (Registry), settings

On startup it creates the data directory and upgrades the schema (``db.migrations``); on
shutdown (SIGTERM under uvicorn) it stops the periodic GC, closes the store and disposes the
engine. The access log and the HTTP metrics wrap the whole ASGI handler, so requests that
match no route are logged and counted too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from litestar import Litestar
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.types import ControllerRouterHandler

from hub_server.api import ROUTE_HANDLERS
from hub_server.api.deps import DEPENDENCIES
from hub_server.api.errors import EXCEPTION_HANDLERS
from hub_server.api.forkd_compat import ForkdCompatController
from hub_server.audit import AuditLog
from hub_server.auth.tokens import TokenService
from hub_server.db.engine import make_engine, make_session_factory
from hub_server.db.migrations import upgrade
from hub_server.logs import access_log_middleware
from hub_server.metrics import HubMetrics, metrics_middleware
from hub_server.registry.context import RegistryContext
from hub_server.registry.service import Registry
from hub_server.settings import Settings
from hub_server.storage.factory import create_store

__all__ = ["create_app", "route_handlers"]

log = logging.getLogger(__name__)


def route_handlers() -> list[ControllerRouterHandler]:
    """Every controller the hub serves.

    Extension point: the forkd compatibility controller (``/registry.json``, ``/packs/…``, from
    ``hub_server.api.forkd_compat``) and the web catalog are appended here.
    """
    handlers: list[ControllerRouterHandler] = list(ROUTE_HANDLERS)
    handlers.append(ForkdCompatController)  # /registry.json and /packs/… for unmodified forkd clients
    return handlers


def create_app(settings: Settings, *, extra_route_handlers: Sequence[ControllerRouterHandler] = ()) -> Litestar:
    """Build the hub's ASGI app for ``settings`` (nothing is opened until the lifespan starts)."""
    metrics = HubMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        engine = make_engine(settings.database_url)
        try:
            await upgrade(engine)
            store = create_store(settings.storage)
            try:
                sessions = make_session_factory(engine)
                audit = AuditLog(sessions, settings.audit_log)
                registry = Registry(RegistryContext(
                    sessions=sessions, store=store, audit=audit, metrics=metrics, limits=settings.limits,
                    blob_redirects=settings.blob_redirects, redirect_expiry=settings.redirect_expiry,
                ))
                app.state.update(engine=engine, sessions=sessions, store=store, tokens=TokenService(sessions),
                                 audit=audit, metrics=metrics, registry=registry, settings=settings)
                async with _periodic_gc(registry, settings.gc_interval):
                    yield
            finally:
                await store.close()
        finally:
            await engine.dispose()

    app = Litestar(
        route_handlers=[*route_handlers(), *extra_route_handlers],
        dependencies=DEPENDENCIES,
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        lifespan=[lifespan],
        openapi_config=OpenAPIConfig(
            title="forkd-hub",
            version="1",
            description="Registry and hub for microVM snapshots. Semantics: docs/http-api.md.",
            path="/schema",
            render_plugins=[SwaggerRenderPlugin()],
        ),
        logging_config=None,  # hub_server.logs configures logging (JSON lines) in the CLI
    )
    # Wrap the whole handler (not per route) so unmatched routes are logged and counted as well.
    app.asgi_handler = access_log_middleware(metrics_middleware(metrics)(app.asgi_handler))  # type: ignore[arg-type]
    return app


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
            except Exception:  # noqa: BLE001 - a failed run is logged and retried next interval
                log.exception("periodic garbage collection failed")

    task = asyncio.create_task(loop(), name="forkd-hub-gc")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

