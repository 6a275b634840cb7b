"""The audit export anchored to the database, and a head to publish elsewhere.

The JSONL export's hash chain (:func:`hub_server.audit.verify_jsonl`) proves lines were not
edited *between* others, but not at the end: editing the newest line, cutting the tail or
re-chaining the whole file leaves a valid chain. The anchor is the database the export
mirrors: every line must be the event row of the same ``id`` (same fields), and every row must
have its line. :func:`verify_export` checks both; :meth:`AuditLog.record <hub_server.audit.AuditLog.record>` refuses to chain onto a last line that
is not its database row. For an anchor outside the hub's reach, ``forkd-hub audit --verify`` prints the
head (event count and SHA-256 of the last line): publish it (a ticket, a signed commit, a
transparency log); ``--expect-head COUNT:SHA256`` later proves the export still starts with
exactly those lines, even if database and file were both rewritten.

Errors: :class:`AuditExportMismatch` (an :class:`~hub_server.audit.AuditChainBroken`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.audit import GENESIS, AuditChainBroken, AuditEvent, audit_record, record_fingerprint, verify_jsonl

__all__ = ["AuditExportMismatch", "AuditHead", "parse_head", "verify_export"]

_BATCH = 5000


class AuditExportMismatch(AuditChainBroken):
    """The export and the database disagree (a line edited, dropped, added, or a head not held)."""


@dataclass(frozen=True)
class AuditHead:
    """What to publish: how many events the export holds and the SHA-256 of its last line."""

    count: int
    sha256: str

    def __str__(self) -> str:
        return f"{self.count}:{self.sha256}"


def parse_head(text: str) -> AuditHead:
    """``COUNT:SHA256`` as printed by ``forkd-hub audit --verify``.

    Raises: ValueError naming the expected form.
    """
    count, _, digest = text.partition(":")
    if not count.isdigit() or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"--expect-head needs COUNT:SHA256 as printed by 'forkd-hub audit --verify', not {text!r}")
    return AuditHead(int(count), digest)


async def verify_export(
    path: Path, sessions: async_sessionmaker[AsyncSession], expect: AuditHead | None = None
) -> AuditHead:
    """Check the export's chain, that it holds exactly the database's events, and ``expect``.

    Returns the head to publish.

    Raises: AuditChainBroken (the chain), AuditExportMismatch (database or published head
    disagree), FileNotFoundError.
    """
    verify_jsonl(path)
    lines: dict[int, tuple[int, str]] = {}  # event id → (line number, fingerprint)
    last, count = GENESIS, 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.rstrip(b"\n")
            record = audit_record(line)
            event_id = record.get("id")
            if not isinstance(event_id, int) or event_id in lines:
                raise AuditExportMismatch(path, number, f"holds event id {event_id!r} twice or not at all")
            lines[event_id] = (number, record_fingerprint(record))
            last, count = hashlib.sha256(line).hexdigest(), number
            if expect is not None and number == expect.count and last != expect.sha256:
                raise AuditExportMismatch(path, number, f"is not the published head {expect}")
    if expect is not None and count < expect.count:
        raise AuditExportMismatch(path, count, f"the export ends before the published head {expect}")
    after = 0
    while True:
        async with sessions() as session:
            rows = (
                await session.exec(
                    select(AuditEvent).where(col(AuditEvent.id) > after).order_by(col(AuditEvent.id)).limit(_BATCH)
                )
            ).all()
        if not rows:
            break
        for row in rows:
            assert row.id is not None
            held = lines.pop(row.id, None)
            if held is None:
                raise AuditExportMismatch(
                    path,
                    count + 1,
                    f"event {row.id} ({row.action} by {row.actor} at "
                    f"{row.at.isoformat()}) is in the database but not in the export",
                )
            if held[1] != record_fingerprint(row.to_dict()):
                raise AuditExportMismatch(path, held[0], f"differs from the database's event {row.id}")
        after = rows[-1].id or after
    if lines:
        event_id, (number, _) = min(lines.items(), key=lambda item: item[1][0])
        raise AuditExportMismatch(path, number, f"holds event {event_id}, which the database does not have")
    return AuditHead(count, last)
