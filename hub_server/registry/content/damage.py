"""Damage marks (table ``damage``): stored content found wrong, recorded once and refused cheaply after.

A forkd pack whose build failed on damaged content (``registry/forkd/compat.py``) is marked by its
pack key (and a layer whose file is not the sha256 its config declares by ``forkd-link/DIGEST``, so
every chain holding it is refused too: a push proves that sha256 now, ``registry/push/filesha.py``, so
this catches layers stored before, or on a hub with the check off), so the next request answers from the
mark instead of assembling gigabytes again; objects
``forkd-hub verify`` finds wrong are marked by their storage key (and where ``--quarantine`` moved
them). Marks are never deleted silently: ``forkd-hub verify --clear-marks`` forgets them after a
repair. Errors: the database's (SQLAlchemyError).
"""

from __future__ import annotations

from datetime import datetime

from sqlmodel import col, delete, select

from hub_server.db.models import Damage
from hub_server.registry.core.context import RegistryContext

__all__ = ["clear_marks", "find_mark", "list_marks", "mark"]

#: How much of a reason is kept (a message naming a file and chunk fits easily).
MAX_REASON = 2000


async def mark(ctx: RegistryContext, key: str, kind: str, reason: str, *, moved_to: str | None = None) -> Damage:
    """Record (or update) the damage mark of ``key``; return it."""
    async with ctx.sessions() as session:
        row = await session.get(Damage, key)
        if row is None:
            row = Damage(key=key, kind=kind, reason=reason[:MAX_REASON], found_at=ctx.clock(), moved_to=moved_to)
        else:
            row.kind, row.reason = kind, reason[:MAX_REASON]
            row.moved_to = moved_to or row.moved_to
        session.add(row)
        await session.commit()
        await session.refresh(row)
        return row


async def find_mark(ctx: RegistryContext, key: str) -> Damage | None:
    """The damage mark of ``key``, if any."""
    async with ctx.sessions() as session:
        return await session.get(Damage, key)


async def list_marks(ctx: RegistryContext) -> list[Damage]:
    """Every damage mark, oldest first."""
    async with ctx.sessions() as session:
        return list((await session.exec(select(Damage).order_by(col(Damage.found_at), col(Damage.key)))).all())


async def clear_marks(ctx: RegistryContext, *, before: datetime | None = None) -> int:
    """Forget every mark (found before ``before``, when given); return how many were removed."""
    async with ctx.sessions() as session:
        statement = delete(Damage)
        if before is not None:
            statement = statement.where(col(Damage.found_at) < before)
        result = await session.exec(statement)
        await session.commit()
        return int(result.rowcount or 0)
