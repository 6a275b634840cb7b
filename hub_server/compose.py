"""``open_hub(settings)``: the one composition root. Everything the hub runs on is built here, once.

The app's lifespan and every ``forkd-hub`` subcommand (``migrate``, ``gc``, ``token``, ``audit``)
enter it and use the :class:`HubServices` it yields::

    async with open_hub(settings) as hub:
        await hub.tokens.create(...)
        await hub.registry.gc.run(...)

It creates the data directory, opens the database engine, checks the schema (upgrading it
when ``settings.migrates_on_start``, or when asked to, as ``forkd-hub migrate`` does), builds
the blob store from ``settings.storage`` and the services on top. Leaving the block closes the
store and disposes of the engine. No other module picks a backend or wires a service.

Errors (raised on entry, each with a one-line message for operators):
    SettingsError: the storage spec is unusable (names the spec).
    HubStartError: the database or the store cannot be opened, a driver is missing, or the
        schema does not match this code (``SchemaMismatch``, a subclass).
"""

from __future__ import annotations

import contextlib
import errno
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.audit import AuditLog
from hub_server.auth.credentials import Authenticator
from hub_server.auth.registry_tokens import RegistryTokenService
from hub_server.auth.tokens import TokenService
from hub_server.auth.web_sessions import WebSessionEnds
from hub_server.db.engine import make_engine, make_session_factory
from hub_server.db.schema import SchemaMismatch, ensure_current
from hub_server.db.schema import state as schema_state
from hub_server.metrics import HubMetrics
from hub_server.outages import Outages
from hub_server.registry.content.signature_policy import SignaturePolicy, SignaturePolicyError
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.readcache import ReadCache
from hub_server.registry.service import Registry
from hub_server.robot_tokens import RobotTokens
from hub_server.settings import Settings, SettingsError
from hub_server.storage import BlobStore, StorageError
from hub_server.storage.factory import create_store
from hub_server.webhooks.delivery import Deliverer, DeliveryPolicy
from hub_server.webhooks.guard import ALLOW_ENV, AllowList
from hub_server.webhooks.service import WebhookService

__all__ = ["HubServices", "HubStartError", "open_hub", "open_store", "redacted_url"]


class HubStartError(RuntimeError):
    """The hub cannot start: the message is one line saying what is wrong and where."""


@dataclass(frozen=True)
class HubServices:
    """Everything built from one ``Settings``; handed to the app (``app.state``) and the CLI."""

    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    store: BlobStore
    tokens: TokenService
    authenticator: Authenticator
    """Every accepted ``Authorization`` form: API tokens and the registry tokens of ``/v2/token``."""
    audit: AuditLog
    metrics: HubMetrics
    registry: Registry
    webhooks: WebhookService
    """Webhook management; queues a delivery for every audited push, tag move and delete."""
    deliverer: Deliverer
    """Sends queued webhook deliveries; the app runs its loop (``Deliverer.running``)."""
    session_ends: WebSessionEnds
    """Web catalog sessions signed out before their cookie expires (refused on every replica)."""
    outages: Outages
    """Which dependencies are down as this process saw them; logged once per change (hub_server/outages.py)."""
    migrations_applied: list[str] = field(default_factory=list)
    """Schema revisions applied while opening (empty when the schema was current)."""

    @property
    def robots(self) -> RobotTokens:
        """Token management on behalf of a user (``/api/v1/tokens``, the web catalog): within their own scopes."""
        return RobotTokens(self.tokens, self.audit)


def redacted_url(url: str) -> str:
    """``url`` without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"


@contextlib.asynccontextmanager
async def open_hub(
    settings: Settings,
    *,
    metrics: HubMetrics | None = None,
    migrate: bool | None = None,
    create: bool = True,
    data_dir: bool = True,
) -> AsyncIterator[HubServices]:
    """Open the database and the store for ``settings`` and build every service once.

    ``migrate``: upgrade an older schema (default ``settings.migrates_on_start``); a schema
    newer than this code is always refused. ``create``: make a new hub when the data directory
    or the database holds none (``serve``, ``migrate``); without it (``token``, ``audit``, ``gc``)
    a missing data directory (of a SQLite hub) or an empty database is refused, and nothing is created.
    ``data_dir``: with ``create``, make the data directory too (``migrate`` of a PostgreSQL hub needs none).

    Raises: SettingsError, HubStartError (see the module docstring).
    """
    if create and (data_dir or settings.database_url.startswith("sqlite")):
        _make_data_dir(settings)  # SQLite, the audit export and pack builds live here
    else:
        _require_existing_hub(settings)
    engine = _engine(settings.database_url)
    try:
        if not create:
            await _require_schema(engine, settings)
        applied = await _check_schema(engine, settings, settings.migrates_on_start if migrate is None else migrate)
        store = _store(settings.storage)
        try:
            sessions = make_session_factory(engine)
            metrics = metrics or HubMetrics()
            outages = Outages(metrics)
            audit = AuditLog(sessions, _audit_export(settings, create))
            registry = Registry(
                RegistryContext(
                    sessions=sessions,
                    store=store,
                    audit=audit,
                    metrics=metrics,
                    limits=settings.limits,
                    blob_redirects=settings.blob_redirects,
                    redirect_expiry=settings.redirect_expiry,
                    cache=ReadCache(ttl=settings.cache_ttl),
                    immutable_tags=settings.immutable_tags,
                    immutable_exempt=settings.immutable_exempt,
                    signatures=_signature_policy(settings),
                    node_ttl=settings.node_ttl,
                    swarm_window=settings.swarm_window,
                    namespace_quota=settings.namespace_quota,
                    outages=outages,
                )
            )
            webhooks, deliverer = _webhooks(settings, sessions, outages)
            audit.subscribe(webhooks.enqueue)
            tokens = TokenService(sessions, max_scopes=settings.limits.token_scopes)
            authenticator = Authenticator(tokens, RegistryTokenService(sessions), cache_ttl=settings.cache_ttl)
            yield HubServices(
                settings=settings,
                engine=engine,
                sessions=sessions,
                store=store,
                tokens=tokens,
                authenticator=authenticator,
                audit=audit,
                metrics=metrics,
                registry=registry,
                webhooks=webhooks,
                deliverer=deliverer,
                session_ends=WebSessionEnds(sessions),
                outages=outages,
                migrations_applied=applied,
            )
        finally:
            await store.close()
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[BlobStore]:
    """The data directory and the blob store of ``settings`` alone, for a process that keeps no registry
    (``forkd-hub serve --mirror-of``: hub_server/mirror/app.py). Closed on leaving.

    Raises: SettingsError, HubStartError (see the module docstring)."""
    _make_data_dir(settings)
    store = _store(settings.storage)
    try:
        yield store
    finally:
        await store.close()


def _webhooks(
    settings: Settings, sessions: async_sessionmaker[AsyncSession], outages: Outages
) -> tuple[WebhookService, Deliverer]:
    try:
        allow = AllowList.parse(settings.webhook_allow)
    except ValueError as e:
        raise SettingsError(f"{ALLOW_ENV}: {e}") from None
    policy = DeliveryPolicy(
        allow,
        attempts=settings.webhook_attempts,
        backoff=settings.webhook_backoff,
        timeout=settings.webhook_timeout,
        poll=settings.webhook_poll,
        ca_file=settings.webhook_ca,
        log_keep=settings.webhook_log_keep,
        log_max_age=settings.webhook_log_max_age,
    )
    try:
        deliverer = Deliverer(sessions, policy, outages)
    except (OSError, ssl.SSLError) as e:
        raise SettingsError(f"FORKD_HUB_WEBHOOK_CA: cannot load {settings.webhook_ca}: {e}") from None
    webhooks = WebhookService(sessions)
    webhooks.on_queued(deliverer.wake)
    return webhooks, deliverer


def _signature_policy(settings: Settings) -> SignaturePolicy | None:
    if settings.signature_policy is None:
        return None
    try:
        return SignaturePolicy.load(settings.signature_policy)
    except SignaturePolicyError as e:
        raise SettingsError(f"FORKD_HUB_SIGNATURE_POLICY: {e}") from None


def _audit_export(settings: Settings, create: bool) -> Path | None:
    """Where this process appends the audit export: ``settings.audit_log``, unless this command creates no hub
    and its directory does not exist (a CLI run on a host without a data directory: the database holds the
    events and their chain; ``forkd-hub audit --export`` writes an export anywhere)."""
    if settings.audit_log is None or (not create and not settings.audit_log.parent.is_dir()):
        return None
    return settings.audit_log


def _make_data_dir(settings: Settings) -> None:
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(settings.data_dir, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "not writable")
    except OSError as e:
        raise HubStartError(f"data directory {settings.data_dir} is unusable: {e.strerror or e}") from None


def _no_hub(settings: Settings, why: str) -> HubStartError:
    where = settings.data_dir
    return HubStartError(
        f"{why}: no hub there. Create one with 'forkd-hub serve --data-dir {where}' (or "
        f"'forkd-hub migrate --data-dir {where}'), or point --data-dir / FORKD_HUB_DATA_DIR "
        f"at an existing hub"
    )


def _require_existing_hub(settings: Settings) -> None:
    """An existing hub's SQLite file, where that is the database; a server database (PostgreSQL) needs no local
    data directory: its schema check (``_require_schema``) says whether a hub is there."""
    if not settings.database_url.startswith("sqlite"):
        return
    if not settings.data_dir.is_dir():
        raise _no_hub(settings, f"data directory {settings.data_dir} does not exist")
    url = make_url(settings.database_url)
    if url.database and url.database != ":memory:" and not os.path.exists(url.database):
        raise _no_hub(settings, f"{url.database} does not exist")


async def _require_schema(engine: AsyncEngine, settings: Settings) -> None:
    try:
        now = await schema_state(engine)
    except (SQLAlchemyError, OSError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise HubStartError(f"database {redacted_url(settings.database_url)} is unusable: {detail}") from None
    if now.current is None:
        raise _no_hub(settings, f"database {redacted_url(settings.database_url)} is empty")


def _engine(url: str) -> AsyncEngine:
    try:
        return make_engine(url)
    except ImportError as e:
        raise HubStartError(f"database {redacted_url(url)}: its driver is not installed ({e})") from None
    except (SQLAlchemyError, ValueError) as e:
        raise HubStartError(f"database URL {redacted_url(url)!r} is unusable: {e}") from None


async def _check_schema(engine: AsyncEngine, settings: Settings, migrate: bool) -> list[str]:
    try:
        return await ensure_current(engine, migrate=migrate)
    except SchemaMismatch as e:
        raise HubStartError(f"database {redacted_url(settings.database_url)}: {e}") from None
    except (SQLAlchemyError, OSError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise HubStartError(f"database {redacted_url(settings.database_url)} is unusable: {detail}") from None


def _store(spec: str) -> BlobStore:
    try:
        return create_store(spec)
    except StorageError as e:  # configured correctly but cannot start
        raise HubStartError(f"storage {spec!r}: {e}") from None
    except ValueError as e:
        raise SettingsError(f"storage {spec!r}: {e}") from None
