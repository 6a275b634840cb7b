"""Upload session leases: at most one request works on a session at a time, whichever replica it reaches.

A request takes the lease on the session's row (``uploads.lease_owner``/``lease_until``, one conditional
``UPDATE``) and holds it with a heartbeat: a background task renews it every third of ``limits.upload_lease``
(15 s by default, ``FORKD_HUB_UPLOAD_LEASE``) for as long as the request works — streaming a body, re-hashing
a staged blob, ingesting a recipe — and gives it back at the end. So a lease outlives its request by seconds,
never by minutes:

- **a replica killed mid-request** stops renewing: its lease runs out within ``upload_lease``, and the
  client's retry (told ``Retry-After``) then resumes the session on any replica;
- **a request that lost the database** cannot give its lease back: the replica keeps trying in the
  background until the database answers (the lease is free as soon as it does), and a retry reaching that
  replica meanwhile takes the lease over at once — the process knows the request that held it is gone;
- **a live request elsewhere** keeps its lease: a second request is told ``BLOB_UPLOAD_BUSY`` (409, with
  ``Retry-After``) instead of waiting, because its offset would be stale by the time it ran.

A holder that finds its lease taken (its heartbeat was late past the lease: a frozen process) stops before
it commits anything: :meth:`Lease.check` raises, and the writer is cancelled.

Lease owners are ``<process id (12 hex)><request id (24 hex)>``: the process part tells a replica which
leases are its own.

Errors: ``HubError(BLOB_UPLOAD_BUSY)``; ``DatabaseUnavailable`` from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import anyio
from sqlalchemy import or_, update
from sqlmodel import col, select

from hub_server.db.models import Upload
from hub_server.db.outage import DatabaseUnavailable
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.context import RegistryContext

__all__ = ["PROCESS_ID", "Lease", "UploadLeases", "busy"]

log = logging.getLogger(__name__)

#: This process's part of every lease owner it writes.
PROCESS_ID = uuid.uuid4().hex[:12]
#: Seconds between two attempts to give back a lease while the database is unreachable.
RELEASE_RETRY = 1.0


def busy(upload_id: str, retry_after: float, why: str = "is busy with another request") -> HubError:
    """``BLOB_UPLOAD_BUSY`` for ``upload_id``, telling the client when to try again."""
    seconds = max(1, math.ceil(retry_after))
    return HubError(
        ErrorCode.BLOB_UPLOAD_BUSY,
        f"upload {upload_id} {why}; retry in {seconds} s",
        {"uuid": upload_id, "retry_after": seconds},
        headers={"Retry-After": str(seconds)},
    )


@dataclass
class Lease:
    """A lease held by one request; ``lost`` once another request took it over."""

    upload_id: str
    owner: str
    duration: timedelta
    lost: bool = False
    renewed: datetime | None = field(default=None)

    def check(self) -> None:
        """Raise ``BLOB_UPLOAD_BUSY`` if the lease was taken over (nothing may be committed then)."""
        if self.lost:
            raise busy(self.upload_id, 1, "was taken over by another request (this one stalled past its lease)")


class UploadLeases:
    """Takes, renews and gives back the leases of upload sessions for one process."""

    def __init__(self, ctx: RegistryContext) -> None:
        self.ctx = ctx
        self._live: set[str] = set()
        self._releases: set[asyncio.Task[None]] = set()

    @property
    def duration(self) -> timedelta:
        return self.ctx.limits.upload_lease

    @contextlib.asynccontextmanager
    async def hold(self, upload_id: str) -> AsyncIterator[Lease]:
        """Hold the lease of ``upload_id`` while the block runs (renewed in the background), then give it back.

        Raises: HubError(BLOB_UPLOAD_BUSY) when another live request holds it.
        """
        lease = await self._take(upload_id)
        self._live.add(lease.owner)
        heartbeat = asyncio.create_task(self._heartbeat(lease), name=f"upload-lease-{upload_id}")
        try:
            yield lease
        finally:
            heartbeat.cancel()
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
                self._live.discard(lease.owner)
                await self._give_back(lease)

    async def renew(self, lease: Lease) -> None:
        """Extend ``lease`` now (before a commit: a fence against a takeover). Raises BLOB_UPLOAD_BUSY if lost."""
        now = self.ctx.clock()
        async with self.ctx.sessions() as session:
            renewed = await session.exec(
                update(Upload)
                .where(col(Upload.id) == lease.upload_id, col(Upload.lease_owner) == lease.owner)
                .values(lease_until=now + lease.duration)
            )
            await session.commit()
        if renewed.rowcount != 1:
            lease.lost = True
        lease.renewed = now
        lease.check()

    async def _take(self, upload_id: str) -> Lease:
        lease = Lease(upload_id, PROCESS_ID + uuid.uuid4().hex[:24], self.duration)
        now = self.ctx.clock()
        async with self.ctx.sessions() as session:
            taken = await session.exec(
                update(Upload)
                .where(
                    col(Upload.id) == upload_id,
                    or_(col(Upload.lease_until).is_(None), col(Upload.lease_until) < now),
                )
                .values(lease_owner=lease.owner, lease_until=now + lease.duration)
            )
            await session.commit()
            if taken.rowcount == 1:
                lease.renewed = now
                return lease
            holder = (
                await session.exec(select(Upload.lease_owner, Upload.lease_until).where(col(Upload.id) == upload_id))
            ).first()
        previous = holder[0] if holder is not None else None
        if previous is not None and self._orphaned(previous) and await self._take_over(lease, previous, now):
            return lease
        until = holder[1] if holder is not None and holder[1] is not None else now
        raise busy(upload_id, (until - now).total_seconds())

    def _orphaned(self, owner: str) -> bool:
        """A lease this process wrote for a request that has ended (it could not give it back)."""
        return owner.startswith(PROCESS_ID) and owner not in self._live

    async def _take_over(self, lease: Lease, previous: str, now: datetime) -> bool:
        async with self.ctx.sessions() as session:
            taken = await session.exec(
                update(Upload)
                .where(col(Upload.id) == lease.upload_id, col(Upload.lease_owner) == previous)
                .values(lease_owner=lease.owner, lease_until=now + lease.duration)
            )
            await session.commit()
        if taken.rowcount != 1:
            return False
        lease.renewed = now
        self.ctx.metrics.upload_lease_takeovers.inc()
        log.info("upload %s: took over the lease of a request that ended without giving it back", lease.upload_id)
        return True

    async def _heartbeat(self, lease: Lease) -> None:
        interval = lease.duration.total_seconds() / 3
        while not lease.lost:
            await asyncio.sleep(interval)
            try:
                await self.renew(lease)
            except HubError:
                log.warning("upload %s: the lease was taken over while this request held it", lease.upload_id)
                return
            except DatabaseUnavailable:
                continue  # the request fails on the database too; its lease runs out if it does not

    async def _give_back(self, lease: Lease) -> None:
        try:
            await self._release(lease)
        except DatabaseUnavailable:
            task = asyncio.create_task(self._release_later(lease), name=f"upload-release-{lease.upload_id}")
            self._releases.add(task)
            task.add_done_callback(self._releases.discard)

    async def _release(self, lease: Lease) -> None:
        async with self.ctx.sessions() as session:
            await session.exec(
                update(Upload)
                .where(col(Upload.id) == lease.upload_id, col(Upload.lease_owner) == lease.owner)
                .values(lease_owner=None, lease_until=None)
            )
            await session.commit()

    async def _release_later(self, lease: Lease) -> None:
        """Give ``lease`` back once the database answers again; pointless once it would have run out."""
        deadline = asyncio.get_running_loop().time() + lease.duration.total_seconds()
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(RELEASE_RETRY)
            try:
                await self._release(lease)
                return
            except DatabaseUnavailable:
                continue
            except Exception:  # noqa: BLE001 - a background chore: the lease runs out anyway
                log.exception("upload %s: giving back the lease failed", lease.upload_id)
                return
