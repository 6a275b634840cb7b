"""Small SQL helpers shared by the registry services (dialect-neutral)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

__all__ = ["IN_BATCH", "batched", "insert_ignore"]

#: Bound parameters per ``IN (...)`` query: well under SQLite's variable limit.
IN_BATCH = 500

T = TypeVar("T")


def batched(items: Iterable[T], size: int = IN_BATCH) -> Iterator[list[T]]:
    """Split ``items`` into lists of at most ``size``."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


async def insert_ignore(session: AsyncSession, model: type[SQLModel], rows: Sequence[dict[str, Any]]) -> None:
    """``INSERT … ON CONFLICT DO NOTHING`` for ``rows`` (SQLite and PostgreSQL)."""
    if not rows:
        return
    table = model.__table__  # type: ignore[attr-defined]
    dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    # One statement executed with many parameter sets: SQLAlchemy compiles it once (cached) and
    # sends the rows in multi-row VALUES batches under the driver's parameter limit itself. A
    # statement built with .values(rows) was compiled anew for every batch: ~10% of a push's
    # hub CPU went to that (docs/benchmarks.md). Rows with different keys go in separate groups.
    statement = insert(table).on_conflict_do_nothing()
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(dict(row))
    for group in groups.values():
        await session.exec(statement, params=group)
