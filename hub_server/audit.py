"""The audit log: who changed what, in the database (one hash chain for the whole deployment) and in JSONL exports.

Every state change (push, tag, delete, visibility, gc, token create/revoke) is recorded by
:meth:`AuditLog.record`: a row in ``audit_events`` (queried by ``forkd-hub audit`` and admin routes),
**sealed** into the deployment's hash chain in the same transaction, then appended to the process's
JSONL export (``jsonl_path``) — the copy that leaves the database's reach.

The chain: each event gets ``seq`` (1, 2, …) and ``line_hash``, the SHA-256 of its export line (its fields
plus ``prev``, the previous event's ``line_hash``; ``hub_server/audit_file.py``). Sealing takes the
``audit_chain`` head row's lock (one conditional ``UPDATE``), so events are chained in commit order across
every replica and process, and seals any event still unsealed (recorded by a replica of the previous release
during a rolling upgrade) before its own. An export is therefore the same file on every replica: a writer
appends, under an ``flock``, every sealed event after the file's last line — whoever recorded it — and
refuses to extend a file whose last line is not the database's (it logs an error and keeps the row);
``forkd-hub audit --verify`` checks chain, database and export together (``hub_server/audit_anchor.py``).

Actors are a token name, ``"anonymous"``, or ``"cli:<login user>"``.

Other services follow the recorded events through :meth:`AuditLog.subscribe` (webhooks do):
a listener runs after the row is committed; its failure is logged and never fails the action.

Errors: :meth:`AuditLog.record` raises ``OSError`` if the JSONL append fails (the row is
already committed); ``AuditChainBroken`` (a ``ValueError``) from the export checks.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.from_thread
import anyio.to_thread
from sqlalchemy import BigInteger, Column, String, Text, update
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import Field, SQLModel, col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.audit_file import (
    GENESIS,
    AuditChainBroken,
    append_missing,
    audit_record,
    export_line,
    line_hash,
    verify_jsonl,
)
from hub_server.auth.models import UTCDateTime, utcnow

__all__ = [
    "GENESIS",
    "JSONL_NAME",
    "AuditChain",
    "AuditChainBroken",
    "AuditEvent",
    "AuditLog",
    "audit_record",
    "chain_line",
    "default_jsonl_path",
    "export_events",
    "record_fingerprint",
    "seal_pending",
    "verify_jsonl",
]

log = logging.getLogger(__name__)

#: The export's file name inside the data directory (server and CLI agree on it).
JSONL_NAME = "audit.jsonl"
MAX_QUERY_LIMIT = 10_000
#: Events sealed or exported per query.
_BATCH = 2000


def default_jsonl_path(data_dir: str | Path) -> Path:
    """Where the server and ``forkd-hub token`` append the audit export."""
    return Path(data_dir) / JSONL_NAME


class AuditEvent(SQLModel, table=True):
    """One recorded action. ``detail`` is a JSON object as text."""

    __tablename__ = "audit_events"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(sa_column=Column(UTCDateTime(), nullable=False, index=True))
    actor: str = Field(sa_column=Column(String(128), nullable=False, index=True))
    action: str = Field(sa_column=Column(String(64), nullable=False, index=True))
    repository: str | None = Field(default=None, sa_column=Column(String(256), nullable=True, index=True))
    reference: str | None = Field(default=None, sa_column=Column(String(256), nullable=True))
    digest: str | None = Field(default=None, sa_column=Column(String(160), nullable=True))
    remote: str | None = Field(default=None, sa_column=Column(String(128), nullable=True))
    detail: str = Field(default="{}", sa_column=Column(Text, nullable=False))
    seq: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True, unique=True, index=True))
    """Place in the deployment's chain (1, 2, …); None until sealed."""
    line_hash: str | None = Field(default=None, sa_column=Column(String(64), nullable=True))
    """SHA-256 of the event's export line (its fields and the previous event's ``line_hash``)."""

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready data (``at`` in ISO 8601, ``detail`` decoded)."""
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "action": self.action,
            "repository": self.repository,
            "reference": self.reference,
            "digest": self.digest,
            "remote": self.remote,
            "detail": json.loads(self.detail),
        }


class AuditChain(SQLModel, table=True):
    """The chain's head: the last sealed ``seq`` and its ``line_hash`` (one row, ``id`` 1; its lock orders seals)."""

    __tablename__ = "audit_chain"

    id: int = Field(primary_key=True)
    seq: int = Field(sa_column=Column(BigInteger, nullable=False))
    line_hash: str = Field(sa_column=Column(String(64), nullable=False))


def chain_line(event: AuditEvent, prev: str) -> bytes:
    """The export line of ``event`` chained onto ``prev``."""
    return export_line(event.to_dict(), prev)


async def seal_pending(session: AsyncSession, legacy_order: Sequence[int] = ()) -> int:
    """Seal every unsealed event into the chain (the caller commits); return how many.

    Takes the head row's lock first, so concurrent sealers (any replica) chain one after another in
    commit order. ``legacy_order``: event ids in the order an existing export holds them, used for the
    events recorded before the chain moved into the database (so that export stays valid).
    """
    await session.exec(update(AuditChain).where(col(AuditChain.id) == 1).values(seq=AuditChain.seq))  # the lock
    head = (await session.exec(select(AuditChain).where(col(AuditChain.id) == 1))).one()
    sealed = 0
    while True:
        pending = list(
            (
                await session.exec(
                    select(AuditEvent).where(col(AuditEvent.seq).is_(None)).order_by(col(AuditEvent.id)).limit(_BATCH)
                )
            ).all()
        )
        if not pending:
            break
        if head.seq == 0 and legacy_order:
            place = {event_id: i for i, event_id in enumerate(legacy_order)}
            pending.sort(key=lambda e: (place.get(e.id or 0, len(place)), e.id or 0))
        for event in pending:
            event.line_hash = line_hash(chain_line(event, head.line_hash))
            event.seq = head.seq + 1
            head.seq, head.line_hash = event.seq, event.line_hash
            session.add(event)
        sealed += len(pending)
        await session.flush()
    session.add(head)
    return sealed


async def export_events(sessions: async_sessionmaker[AsyncSession], path: Path) -> int:
    """Append to the export at ``path`` every sealed event after its last line; return how many.

    Raises: AuditChainBroken (the last line is not the database's record of its event: nothing is
    chained onto it), OSError.
    """
    return await anyio.to_thread.run_sync(
        append_missing, path, lambda last: anyio.from_thread.run(_lines_after, sessions, path, last)
    )


async def _lines_after(sessions: async_sessionmaker[AsyncSession], path: Path, last: bytes | None) -> list[bytes]:
    """The export lines of the sealed events after ``last`` (None: from the first)."""
    after, prev = 0, GENESIS
    if last is not None:
        try:
            event_id = int(audit_record(last)["id"])
        except (ValueError, KeyError, TypeError) as e:
            raise AuditChainBroken(path, 0, f"the last line is not an audit record ({e}); not chaining onto it") from e
        async with sessions() as session:
            row = await session.get(AuditEvent, event_id)
        if row is None:
            raise AuditChainBroken(
                path, 0, f"the last line holds event {event_id}, which the database does not have; not chaining onto it"
            )
        if row.seq is None or row.line_hash != line_hash(last):
            raise AuditChainBroken(
                path,
                0,
                f"the last line (event {event_id}) differs from the database's record of it; not chaining onto it",
            )
        after, prev = row.seq, row.line_hash
    lines: list[bytes] = []
    while True:
        async with sessions() as session:
            rows = (
                await session.exec(
                    select(AuditEvent).where(col(AuditEvent.seq) > after).order_by(col(AuditEvent.seq)).limit(_BATCH)
                )
            ).all()
        if not rows:
            return lines
        for row in rows:
            line = chain_line(row, prev)
            if line_hash(line) != row.line_hash:
                raise AuditChainBroken(
                    path, 0, f"the database's event {row.id} does not hash to its place in the chain (altered)"
                )
            lines.append(line)
            after, prev = row.seq or after, row.line_hash


class AuditLog:
    """Records and queries audit events. ``jsonl_path=None`` keeps only the database rows."""

    def __init__(
        self,
        session_factory: async_sessionmaker[AsyncSession],
        jsonl_path: Path | None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._sessions = session_factory
        self.jsonl_path = jsonl_path
        self._clock = clock
        self._listeners: list[Callable[[AuditEvent], Awaitable[object]]] = []
        self._sealed_once = False

    def subscribe(self, listener: Callable[[AuditEvent], Awaitable[object]]) -> None:
        """Call ``listener(event)`` after each recorded event (errors are logged, never raised)."""
        self._listeners.append(listener)

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """The database the export is anchored to."""
        return self._sessions

    async def record(
        self,
        actor: str,
        action: str,
        *,
        repository: str | None = None,
        reference: str | None = None,
        digest: str | None = None,
        remote: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        """Store one event and append it to the JSONL export.

        Raises:
            TypeError: ``detail`` is not JSON-serialisable.
            OSError: the JSONL append failed (the database row is already committed).
        """
        event = AuditEvent(
            at=self._clock(),
            actor=actor,
            action=action,
            repository=repository,
            reference=reference,
            digest=digest,
            remote=remote,
            detail=json.dumps(detail or {}, sort_keys=True),
        )
        async with self._sessions() as session:
            session.add(event)
            await seal_pending(session, await self._legacy_order())
            await session.commit()
        try:
            if self.jsonl_path is not None:
                try:
                    await export_events(self._sessions, self.jsonl_path)
                except AuditChainBroken as e:  # the row is kept; 'forkd-hub audit --verify' reports the gap
                    log.error(
                        "audit export %s not appended to (event %s kept in the database): %s",
                        self.jsonl_path,
                        event.id,
                        e,
                    )
        finally:
            for listener in self._listeners:
                try:
                    await listener(event)
                except Exception:  # noqa: BLE001 - a listener never fails the recorded action
                    log.exception("audit listener %r failed on %s", listener, event.action)

    async def _legacy_order(self) -> list[int]:
        """The event ids of this process's export in its order, while nothing is sealed yet (the first
        seal after the chain moved into the database keeps an existing export valid); else nothing."""
        if self._sealed_once or self.jsonl_path is None:
            return []
        async with self._sessions() as session:
            head = await session.get(AuditChain, 1)
        self._sealed_once = head is not None and head.seq > 0
        if self._sealed_once:
            return []
        return await anyio.to_thread.run_sync(_ids_in_order, self.jsonl_path)

    async def query(
        self,
        *,
        action: str | None = None,
        repository: str | None = None,
        actor: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Matching events, newest first, at most ``limit`` (1 … 10,000).

        Raises:
            ValueError: ``limit`` out of range, or ``since`` is a naive datetime.
        """
        if not 1 <= limit <= MAX_QUERY_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_QUERY_LIMIT}, got {limit}")
        statement = select(AuditEvent)
        if action is not None:
            statement = statement.where(AuditEvent.action == action)
        if repository is not None:
            statement = statement.where(AuditEvent.repository == repository)
        if actor is not None:
            statement = statement.where(AuditEvent.actor == actor)
        if since is not None:
            if since.tzinfo is None:
                raise ValueError("since must be timezone-aware")
            statement = statement.where(col(AuditEvent.at) >= since)
        statement = statement.order_by(col(AuditEvent.id).desc()).limit(limit)
        async with self._sessions() as session:
            rows = await session.exec(statement)
            return [row.to_dict() for row in rows.all()]


def record_fingerprint(record: dict[str, Any]) -> str:
    """A digest of an event's fields, equal for a line and its database row."""
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _ids_in_order(path: Path) -> list[int]:
    """Event ids of an export, in its order (unreadable lines skipped); empty if there is no file."""
    ids: list[int] = []
    try:
        with path.open("rb") as f:
            for raw in f:
                try:
                    ids.append(int(audit_record(raw.rstrip(b"\n"))["id"]))
                except (ValueError, KeyError, TypeError):
                    continue
    except FileNotFoundError:
        pass
    return ids
