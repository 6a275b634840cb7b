"""Alembic's environment for the hub's schema (online mode only; async engines).

Two ways in:

* ``hub_server.db.schema`` (``forkd-hub migrate``, start-up) passes an open synchronous
  connection in ``config.attributes["connection"]``; it already runs in a transaction.
* The ``alembic`` command line (writing revisions, see docs/decisions/0005-schema-migrations.md)
  builds an async engine from ``-x url=…`` or ``FORKD_HUB_DATABASE_URL``.

SQLite runs in batch mode (``render_as_batch``) so ``ALTER`` steps become table copies there.
"""

from __future__ import annotations

import asyncio
import os
from typing import Literal

from alembic import context
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

from hub_server.db.engine import import_models, make_engine
from hub_server.db.schema import include_object

import_models()
TARGET = SQLModel.metadata


def _render_item(type_: str, obj: object, autogen_context: object) -> str | Literal[False]:
    """Render our column types as plain SQLAlchemy ones: a revision never imports the models."""
    from sqlmodel.sql.sqltypes import AutoString

    from hub_server.db.types import UTCDateTime

    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    if type_ == "type" and isinstance(obj, AutoString):
        return f"sa.String(length={obj.length})" if obj.length else "sa.String()"
    return False


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=TARGET,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=include_object,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_url(url: str) -> None:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_configure)
            await conn.commit()
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ.get("FORKD_HUB_DATABASE_URL")
    if not url:
        raise SystemExit("alembic: pass -x url=sqlite+aiosqlite:///PATH or set FORKD_HUB_DATABASE_URL")
    asyncio.run(_run_with_url(url))


if context.is_offline_mode():
    raise SystemExit("alembic: offline (--sql) mode is not supported; run against a database")
run_migrations_online()
