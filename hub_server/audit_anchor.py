"""Verifying the audit trail of the whole deployment: the database's chain, an export, a published head.

The database holds every event with its place in one hash chain (``hub_server/audit.py``), whichever replica
recorded it. :func:`verify_trail` seals what is pending, then recomputes that chain from the events' fields —
an event edited in the database no longer hashes to its place — and checks the export (the JSONL file a
replica appends to): line for line it must be the chain's lines, in order. An export that ends early (a
replica that recorded nothing since another one did, or a cut tail) is brought up to date from the database;
one that holds an edited, foreign or extra line is refused where it first differs. For an anchor outside
the hub's reach, it returns the head (event count and SHA-256 of the last line): publish it (a ticket, a signed
commit, a transparency log); ``--expect-head COUNT:SHA256`` later proves the chain still starts with exactly
those events, even if database and exports were all rewritten.

Errors: :class:`AuditExportMismatch` (an :class:`~hub_server.audit_file.AuditChainBroken`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.audit import AuditEvent, chain_line, export_events, seal_pending
from hub_server.audit_file import GENESIS, AuditChainBroken, audit_record, line_hash, verify_jsonl

__all__ = ["AuditExportMismatch", "AuditHead", "TrailReport", "parse_head", "verify_trail"]

_BATCH = 5000


class AuditExportMismatch(AuditChainBroken):
    """The export and the database disagree, the database's chain was altered, or a head is not held."""


@dataclass(frozen=True)
class AuditHead:
    """What to publish: how many events the chain holds and the SHA-256 of its last line."""

    count: int
    sha256: str

    def __str__(self) -> str:
        return f"{self.count}:{self.sha256}"


@dataclass(frozen=True)
class TrailReport:
    """A verified trail: its ``head``, and how many lines were appended to the export to bring it up to date."""

    head: AuditHead
    appended: int = 0


def parse_head(text: str) -> AuditHead:
    """``COUNT:SHA256`` as printed by ``forkd-hub audit --verify``.

    Raises: ValueError naming the expected form.
    """
    count, _, digest = text.partition(":")
    if not count.isdigit() or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"--expect-head needs COUNT:SHA256 as printed by 'forkd-hub audit --verify', not {text!r}")
    return AuditHead(int(count), digest)


async def verify_trail(
    sessions: async_sessionmaker[AsyncSession], export: Path | None = None, expect: AuditHead | None = None
) -> TrailReport:
    """Check the database's chain, ``export`` against it (bringing it up to date), and ``expect``.

    Raises: AuditExportMismatch (the database's chain, the export or the published head disagree),
    AuditChainBroken (the export's own chain), FileNotFoundError.
    """
    async with sessions() as session:
        await seal_pending(session)
        await session.commit()
    hashes = await _chain(sessions, expect)
    head = AuditHead(len(hashes), hashes[-1] if hashes else GENESIS)
    if expect is not None and head.count < expect.count:
        raise AuditExportMismatch(None, head.count, f"the chain ends before the published head {expect}")
    if export is None:
        return TrailReport(head)
    if await anyio.to_thread.run_sync(_check_export, export, hashes) == len(hashes):
        return TrailReport(head)
    appended = await export_events(sessions, export)
    if await anyio.to_thread.run_sync(_check_export, export, hashes) != len(hashes):  # the chain grew meanwhile
        return await verify_trail(sessions, export, expect)
    return TrailReport(head, appended)


async def _chain(sessions: async_sessionmaker[AsyncSession], expect: AuditHead | None) -> list[str]:
    """Every event's line hash in chain order, each recomputed from its fields and checked."""
    hashes: list[str] = []
    prev, after = GENESIS, 0
    while True:
        async with sessions() as session:
            rows = (
                await session.exec(
                    select(AuditEvent)
                    .where(col(AuditEvent.seq).is_not(None), col(AuditEvent.seq) > after)
                    .order_by(col(AuditEvent.seq))
                    .limit(_BATCH)
                )
            ).all()
        if not rows:
            return hashes
        for row in rows:
            assert row.seq is not None
            if row.seq != len(hashes) + 1:
                raise AuditExportMismatch(None, len(hashes) + 1, f"the database's chain has no event {len(hashes) + 1}")
            got = line_hash(chain_line(row, prev))
            if got != row.line_hash:
                raise AuditExportMismatch(
                    None,
                    row.seq,
                    f"the database's event {row.id} ({row.action} by {row.actor} at {row.at.isoformat()}) "
                    "was altered: it no longer hashes to its place in the chain",
                )
            if expect is not None and row.seq == expect.count and got != expect.sha256:
                raise AuditExportMismatch(None, row.seq, f"the chain is not the published head {expect}")
            hashes.append(got)
            prev, after = got, row.seq


def _check_export(path: Path, hashes: list[str]) -> int:
    """How many lines the export holds (0: no file), each being the chain's line at its place.

    Raises: AuditChainBroken (its own chain), AuditExportMismatch (a line not the database's).
    """
    if not path.exists():
        return 0
    verify_jsonl(path)
    count = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.rstrip(b"\n")
            if number > len(hashes):
                try:
                    event = audit_record(line).get("id")
                except ValueError:
                    event = None
                raise AuditExportMismatch(path, number, f"holds event {event}, which the database does not have")
            if line_hash(line) != hashes[number - 1]:
                event = audit_record(line).get("id")
                raise AuditExportMismatch(path, number, f"differs from the database's event {event}")
            count = number
    return count
