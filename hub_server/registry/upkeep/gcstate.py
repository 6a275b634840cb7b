"""What garbage collection keeps in the database so replicas can share it: a lease and marks.

**Lease** (``gc_leases``): one row per name; a run takes it with one conditional statement
(free, or expired because its holder died) and gives it back at the end, so one replica
sweeps at a time. A replica that finds it held skips its run (:class:`GcBusy`). An operator holds it
too, for a while, to keep every replica from deleting anything during a backup (``forkd-hub gc --hold``,
holder ``hold:…``; ``--release`` gives it back, or it expires).

**Marks** (``gc_marks``): the first run that finds a manifest or blob unreferenced records
when (``unreferenced_since``); a run deletes it only once that is older than the grace period,
and forgets the mark if the object is referenced again. So the grace period starts when an
object became unreachable (a tag deleted or moved), not when it was created: a pull that
resolved the old tag just before keeps its layers for the whole grace period.

Errors: :class:`GcBusy`; SQLAlchemy errors pass through.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.db.models import GcLease, GcMark
from hub_server.registry.core.sql import batched, insert_ignore

__all__ = [
    "GC_LEASE",
    "HOLD_PREFIX",
    "GcBusy",
    "acquire_lease",
    "holder_name",
    "release_hold",
    "release_lease",
    "settle_marks",
]

#: A run renews nothing: it must finish within this, or another replica may start sweeping.
GC_LEASE = timedelta(hours=1)
LEASE_NAME = "gc"
#: Holders of a lease taken by ``forkd-hub gc --hold`` (a backup in progress), not by a run.
HOLD_PREFIX = "hold:"


class GcBusy(RuntimeError):
    """Another replica holds the GC lease (``holder``, until ``expires_at``)."""

    def __init__(self, holder: str, expires_at: datetime) -> None:
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(
            f"another garbage collection is running ({holder}, lease until {expires_at.isoformat(timespec='seconds')})"
        )


def holder_name() -> str:
    """``host:pid:random``, unique per run."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


async def acquire_lease(session: AsyncSession, holder: str, now: datetime, ttl: timedelta = GC_LEASE) -> None:
    """Take the GC lease for ``holder`` (committed). Raises GcBusy when another live run holds it."""
    taken = (
        await session.exec(
            update(GcLease)
            .where(
                col(GcLease.name) == LEASE_NAME,
                or_(col(GcLease.expires_at) < now, col(GcLease.holder) == holder),
            )
            .values(holder=holder, expires_at=now + ttl)
        )
    ).rowcount
    if taken != 1:
        await insert_ignore(session, GcLease, [{"name": LEASE_NAME, "holder": holder, "expires_at": now + ttl}])
    await session.commit()
    row = await session.get(GcLease, LEASE_NAME)
    if row is not None:
        await session.refresh(row)
    if row is None or row.holder != holder:
        raise GcBusy(row.holder if row else "?", row.expires_at if row else now)


async def release_hold(session: AsyncSession) -> bool:
    """Give back a lease ``forkd-hub gc --hold`` took (whoever took it); whether there was one."""
    done = await session.exec(
        delete(GcLease).where(col(GcLease.name) == LEASE_NAME, col(GcLease.holder).startswith(HOLD_PREFIX))
    )
    await session.commit()
    return bool(done.rowcount)


async def release_lease(session: AsyncSession, holder: str) -> None:
    await session.exec(delete(GcLease).where(col(GcLease.name) == LEASE_NAME, col(GcLease.holder) == holder))
    await session.commit()


async def settle_marks(
    session: AsyncSession,
    kind: str,
    unreferenced: Iterable[str],
    now: datetime,
    grace: timedelta,
    *,
    dry_run: bool = False,
) -> set[str]:
    """Record when each of ``unreferenced`` was first seen so, forget marks of everything else of
    ``kind``, and return those unreferenced for at least ``grace`` (not committed).

    With ``dry_run`` nothing is written; objects seen for the first time are not due.
    """
    unreferenced = set(unreferenced)
    marks = dict(
        (await session.exec(select(GcMark.digest, GcMark.unreferenced_since).where(GcMark.kind == kind))).all()
    )
    if not dry_run:
        referenced_again = [d for d in marks if d not in unreferenced]
        for batch in batched(referenced_again):
            await session.exec(delete(GcMark).where(col(GcMark.kind) == kind, col(GcMark.digest).in_(batch)))
        await insert_ignore(
            session,
            GcMark,
            [{"kind": kind, "digest": d, "unreferenced_since": now} for d in sorted(unreferenced - marks.keys())],
        )
    cutoff = now - grace
    return {d for d in unreferenced if marks.get(d, now) <= cutoff}  # a zero grace needs no earlier run
