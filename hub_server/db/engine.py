"""The metadata database: one async SQLAlchemy engine, sessions, schema creation.

SQLite (``sqlite+aiosqlite:///DIR/hub.db``) is the embedded default; PostgreSQL
(``postgresql+asyncpg://…``) uses the same models. Every table is a SQLModel class
registered on ``SQLModel.metadata``; :func:`import_models` imports every module that
defines tables (:data:`MODEL_MODULES`) so no table is forgotten. The schema itself is made
and upgraded by Alembic revisions (``hub_server/db/schema.py``), never by ``create_all``.
"""

from __future__ import annotations

import importlib
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.outage import OutageAwareSession
from hub_server.settings import sqlite_url as sqlite_url  # the default URL is a setting; re-exported for callers

#: Seconds a new PostgreSQL connection may take before the database counts as unreachable.
CONNECT_TIMEOUT = 10

#: Modules that define SQLModel tables. Add yours here.
MODEL_MODULES = (
    "hub_server.db.models",
    "hub_server.auth.models",
    "hub_server.audit",
    "hub_server.webhooks.models",
    "hub_server.db.models_policy",
    "hub_server.db.models_fleet",
    "hub_server.db.models_limits",
)


def make_engine(url: str) -> AsyncEngine:
    """Create the engine. SQLite gets WAL, foreign keys and a busy timeout."""
    if url.startswith("sqlite"):
        engine = create_async_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: object) -> None:  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    # a server that does not answer is an outage after 10 s (asyncpg's default is 60), not a request stuck for a minute
    return create_async_engine(url, pool_pre_ping=True, connect_args={"timeout": CONNECT_TIMEOUT})


def make_session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions whose blocks raise ``DatabaseUnavailable`` when the database is unreachable (db/outage.py)."""
    return async_sessionmaker(engine, class_=OutageAwareSession, expire_on_commit=False)


def import_models() -> None:
    for name in MODEL_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise


async def create_schema(engine: AsyncEngine) -> None:
    """Bring the schema to this code's revision (idempotent); tests and tools that hold an engine."""
    from hub_server.db.schema import upgrade

    await upgrade(engine)
