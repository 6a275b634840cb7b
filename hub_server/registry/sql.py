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
    # Batches keep the bound-parameter count under SQLite's limit for wide rows too.
    for batch in batched(rows, max(1, IN_BATCH // max(1, len(rows[0])))):
        await session.exec(insert(table).values(batch).on_conflict_do_nothing())
