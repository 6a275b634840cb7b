"""The audit log: who changed what, in the database and in an append-only JSONL file.

Every state change (push, tag, delete, visibility, gc, token create/revoke) is recorded
twice by :meth:`AuditLog.record`: a row in ``audit_events`` (queried by ``forkd-hub audit``
and admin routes) and one JSON line appended to ``jsonl_path`` — the export that
leaves the database's reach. Each line carries ``prev``, the SHA-256 of the line before it
(``"0" * 64`` for the first), so editing, removing or reordering lines breaks the chain
and :func:`verify_jsonl` says where. The chain's end is anchored in the database
(``hub_server.audit_anchor``): an append refuses to chain onto a last line that is not its
event's row (it logs an error and keeps only the row). Appends take an exclusive ``flock`` and open the file
with ``O_APPEND``, so the server and the CLI can write to the same file.

Actors are a token name, ``"anonymous"``, or ``"cli:<login user>"``.

Other services follow the recorded events through :meth:`AuditLog.subscribe` (webhooks do):
a listener runs after the row is committed; its failure is logged and never fails the action.

Errors: :meth:`AuditLog.record` raises ``OSError`` if the JSONL append fails (the row is
already committed); :func:`verify_jsonl` raises :class:`AuditChainBroken` (a ``ValueError``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
from sqlalchemy import Column, String, Text
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import Field, SQLModel, col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.models import UTCDateTime, utcnow

__all__ = [
    "JSONL_NAME",
    "AuditChainBroken",
    "AuditEvent",
    "AuditLog",
    "audit_record",
    "default_jsonl_path",
    "record_fingerprint",
    "verify_jsonl",
]

log = logging.getLogger(__name__)

#: The export's file name inside the data directory (server and CLI agree on it).
JSONL_NAME = "audit.jsonl"
GENESIS = "0" * 64
MAX_QUERY_LIMIT = 10_000
_TAIL_BLOCK = 4096


def default_jsonl_path(data_dir: str | Path) -> Path:
    """Where the server and ``forkd-hub token`` append the audit export."""
    return Path(data_dir) / JSONL_NAME


class AuditChainBroken(ValueError):
    """The JSONL export was altered: ``line`` (1-based) does not follow the one before it."""

    def __init__(self, path: Path, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        super().__init__(f"{path}: line {line}: {reason}")


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
            await session.commit()
        try:
            if self.jsonl_path is not None:
                try:
                    await anyio.to_thread.run_sync(
                        _append_chained, self.jsonl_path, event.to_dict(), self._check_previous
                    )
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

    def _check_previous(self, line: bytes) -> str | None:
        """In the append's worker thread: why the export's last line is not genuine, or None."""
        return anyio.from_thread.run(_why_not_genuine, self._sessions, line)

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


def audit_record(line: bytes) -> dict[str, Any]:
    """The event of one export line (without its ``prev``). Raises: ValueError."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    record.pop("prev", None)
    return record


def record_fingerprint(record: dict[str, Any]) -> str:
    """A digest of an event's fields, equal for a line and its database row."""
    return hashlib.sha256(json.dumps(record, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


async def _why_not_genuine(sessions: async_sessionmaker[AsyncSession], line: bytes) -> str | None:
    """Why ``line`` is not the database's record of its event, or None when it is."""
    try:
        record = audit_record(line)
        event_id = int(record["id"])
    except (ValueError, KeyError, TypeError) as e:
        return f"the last line is not an audit record ({e})"
    async with sessions() as session:
        row = await session.get(AuditEvent, event_id)
    if row is None:
        return f"the last line holds event {event_id}, which the database does not have"
    if record_fingerprint(row.to_dict()) != record_fingerprint(record):
        return f"the last line (event {event_id}) differs from the database's record of it"
    return None


def _line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def _last_line(fd: int) -> bytes | None:
    """The last complete line of the file open at ``fd`` (without its newline), if any."""
    end = os.lseek(fd, 0, os.SEEK_END)
    if end == 0:
        return None
    tail = b""
    position = end
    while position > 0:
        step = min(_TAIL_BLOCK, position)
        position -= step
        tail = os.pread(fd, step, position) + tail
        # Skip the trailing newline; stop once another newline precedes the last line.
        if tail.rfind(b"\n", 0, len(tail) - 1) != -1:
            break
    return tail.rstrip(b"\n").rsplit(b"\n", 1)[-1]


def _append_chained(
    path: Path, record: dict[str, Any], check_previous: Callable[[bytes], str | None] | None = None
) -> None:
    """Append ``record`` plus the hash of the previous line, atomically w.r.t. other writers.

    ``check_previous(last_line)`` (under the lock) says why the last line must not be chained
    onto (an edited or foreign line), or None.

    Raises: AuditChainBroken (``check_previous`` refused), OSError.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        previous = _last_line(fd)
        torn = previous is not None and os.pread(fd, 1, os.lseek(fd, 0, os.SEEK_END) - 1) != b"\n"
        if previous is not None and not torn and check_previous is not None:
            reason = check_previous(previous)
            if reason is not None:
                raise AuditChainBroken(path, _count_lines(fd), f"{reason}; not chaining onto it")
        chained = {**record, "prev": GENESIS if previous is None else _line_hash(previous)}
        line = json.dumps(chained, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        if torn:
            # A torn earlier write (a crash): start on a fresh line (verify_jsonl will flag the torn one).
            line = b"\n" + line
        written = 0
        while written < len(line):  # os.write may be partial; O_APPEND keeps each at the end
            written += os.write(fd, line[written:])
    finally:
        os.close(fd)  # also releases the lock


def _count_lines(fd: int) -> int:
    count, offset = 0, 0
    while block := os.pread(fd, 1 << 20, offset):
        count += block.count(b"\n")
        offset += len(block)
    return count


def verify_jsonl(path: Path) -> int:
    """Check the hash chain of an audit export; return how many events it holds.

    Raises:
        AuditChainBroken: a line is not JSON, lacks ``prev``, or its ``prev`` is not the hash
            of the line before it (a line was edited, removed, inserted or reordered).
        FileNotFoundError: ``path`` does not exist.
    """
    expected = GENESIS
    count = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.rstrip(b"\n")
            try:
                prev = json.loads(line)["prev"]
            except (ValueError, KeyError, TypeError) as e:
                raise AuditChainBroken(path, number, f"not an audit record ({e})") from e
            if prev != expected:
                raise AuditChainBroken(path, number, "does not chain to the previous line")
            expected = _line_hash(line)
            count = number
    return count
