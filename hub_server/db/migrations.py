"""Schema migrations: an ordered list of steps, applied once each, recorded in ``schema_versions``.

Migration 1 is ``create_all`` of every model module (``engine.create_schema``). A later change
to the tables appends a step here (a function taking an ``AsyncConnection``) instead of
editing an earlier one. ``forkd-hub migrate`` and ``serve``'s startup both call :func:`upgrade`,
which is idempotent.

Errors: SQLAlchemy errors from the database pass through (the CLI reports them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import SQLModel

from hub_server.db.engine import import_models
from hub_server.db.models import SchemaVersion, utcnow

__all__ = ["LATEST", "MIGRATIONS", "current_version", "upgrade"]


async def _initial_schema(conn: AsyncConnection) -> None:
    import_models()
    await conn.run_sync(SQLModel.metadata.create_all)


#: version → step. Never edit a released step; append a new one.
MIGRATIONS: dict[int, Callable[[AsyncConnection], Awaitable[None]]] = {
    1: _initial_schema,
}
LATEST = max(MIGRATIONS)


async def current_version(engine: AsyncEngine) -> int:
    """The highest applied migration, 0 for an empty database."""
    async with engine.connect() as conn:
        has_table = await conn.run_sync(lambda c: c.dialect.has_table(c, SchemaVersion.__tablename__))
        if not has_table:
            return 0
        versions = (await conn.execute(select(SchemaVersion.version))).scalars().all()  # type: ignore[call-overload]
        return max(versions, default=0)


async def upgrade(engine: AsyncEngine) -> list[int]:
    """Apply every migration newer than the database; return the versions applied."""
    applied: list[int] = []
    start = await current_version(engine)
    for version in sorted(v for v in MIGRATIONS if v > start):
        async with engine.begin() as conn:
            await MIGRATIONS[version](conn)
            table = SchemaVersion.__table__  # type: ignore[attr-defined]
            await conn.execute(table.insert().values(version=version, applied_at=utcnow()))
        applied.append(version)
    return applied
