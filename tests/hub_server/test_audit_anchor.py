"""Issue 16 item 3, issue 28 item 5: the audit trail — one hash chain in the database for every replica, exports
that are copies of it line for line, and a publishable head."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import anyio
import pytest
from sqlmodel import select

from hub_server.audit import GENESIS, AuditChain, AuditEvent, AuditLog, verify_jsonl
from hub_server.audit_anchor import AuditExportMismatch, AuditHead, parse_head, verify_trail
from hub_server.audit_file import export_line
from hub_server.auth.models import utcnow
from tests.hub_server.test_audit import anyio_backend, jsonl, sessions  # noqa: F401 - fixtures

pytestmark = pytest.mark.anyio


def rechain(lines: list[bytes]) -> list[bytes]:
    """What a forger does after editing: recompute every ``prev`` so the chain is valid again."""
    out, prev = [], GENESIS
    for line in lines:
        record = {**json.loads(line), "prev": prev}
        out.append(json.dumps(record, sort_keys=True, separators=(",", ":")).encode())
        prev = hashlib.sha256(out[-1]).hexdigest()
    return out


def write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


async def recorded(sessions, jsonl, n: int = 4) -> AuditLog:  # noqa: F811
    audit = AuditLog(sessions, jsonl)
    for i in range(n):
        await audit.record("ci", "push", repository=f"acme/r{i}", digest=f"blake3:{i:064x}")
    return audit


async def verify_export(path, sessions, expect=None) -> AuditHead:  # noqa: F811
    return (await verify_trail(sessions, path, expect)).head


async def test_an_honest_export_verifies_and_gives_its_head(sessions, jsonl):  # noqa: F811
    audit = AuditLog(sessions, jsonl)
    async with anyio.create_task_group() as group:  # concurrent appends may land out of id order
        for i in range(10):
            group.start_soon(lambda i=i: audit.record("ci", "push", repository=f"acme/r{i}"))
    head = await verify_export(jsonl, sessions)
    last = jsonl.read_bytes().splitlines()[-1]
    assert head == AuditHead(10, hashlib.sha256(last).hexdigest())
    assert parse_head(str(head)) == head
    assert await verify_export(jsonl, sessions, expect=head) == head


async def test_replicas_exports_are_the_same_file_and_each_verifies(sessions, tmp_path):  # noqa: F811
    """Issue 28 item 5: two processes (replicas) on one database, each with its own export; events recorded by
    one reach the other's export, both verify, and both are the same bytes once each has caught up."""
    one, two = AuditLog(sessions, tmp_path / "a" / "audit.jsonl"), AuditLog(sessions, tmp_path / "b" / "audit.jsonl")
    async with anyio.create_task_group() as group:
        for i in range(12):
            group.start_soon(lambda i=i: (one if i % 2 else two).record("ci", "push", repository=f"acme/r{i}"))
    reports = [await verify_trail(sessions, log.jsonl_path) for log in (one, two)]
    assert reports[0].head == reports[1].head and reports[0].head.count == 12
    assert one.jsonl_path.read_bytes() == two.jsonl_path.read_bytes()
    assert verify_jsonl(one.jsonl_path) == 12


async def test_a_cut_tail_is_restored_from_the_database(sessions, jsonl):  # noqa: F811
    """An export that ends early (a replica that recorded nothing since, or a cut tail) is a prefix of the
    chain: verify brings it up to date and says how many lines it appended."""
    await recorded(sessions, jsonl)
    whole = jsonl.read_bytes()
    write(jsonl, whole.splitlines()[:2])
    report = await verify_trail(sessions, jsonl)
    assert report.appended == 2 and report.head.count == 4
    assert jsonl.read_bytes() == whole


async def test_an_event_edited_in_the_database_alone_is_caught(sessions, jsonl):  # noqa: F811
    await recorded(sessions, jsonl)
    async with sessions() as session:
        row = await session.get(AuditEvent, 2)
        row.repository = "acme/zz"
        session.add(row)
        await session.commit()
    with pytest.raises(AuditExportMismatch, match=r"event 2 .*was altered") as info:
        await verify_trail(sessions)
    assert info.value.line == 2


@pytest.mark.parametrize("forgery", ["edit-newest", "rechain-all", "add-line"])
async def test_forgeries_the_chain_alone_cannot_see_are_caught(sessions, jsonl, forgery):  # noqa: F811
    await recorded(sessions, jsonl)
    lines = jsonl.read_bytes().splitlines()
    if forgery == "edit-newest":
        lines[-1] = lines[-1].replace(b"acme/r3", b"acme/zz")
    elif forgery == "truncate-tail":
        del lines[-2:]
    elif forgery == "rechain-all":
        lines = rechain([line.replace(b"acme/r1", b"acme/zz") for line in lines])
    else:
        record = {**json.loads(lines[-1]), "id": 99, "repository": "acme/forged"}
        lines = rechain([*lines, json.dumps(record).encode()])
    write(jsonl, lines)
    assert verify_jsonl(jsonl) == len(lines)  # the chain alone says nothing is wrong
    with pytest.raises(AuditExportMismatch) as info:
        await verify_export(jsonl, sessions)
    expected = {
        "edit-newest": (4, "differs from the database's event 4"),
        "rechain-all": (2, "differs from the database's event 2"),
        "add-line": (5, "holds event 99, which the database does not have"),
    }[forgery]
    assert info.value.line == expected[0] and expected[1] in str(info.value)


async def test_the_next_append_does_not_chain_onto_an_edited_line(sessions, jsonl, caplog):  # noqa: F811
    audit = await recorded(sessions, jsonl)
    lines = jsonl.read_bytes().splitlines()
    lines[-1] = lines[-1].replace(b"acme/r3", b"acme/zz")
    write(jsonl, lines)
    with caplog.at_level(logging.ERROR, logger="hub_server.audit"):
        await audit.record("ci", "push", repository="acme/next")
    assert jsonl.read_bytes().splitlines() == lines  # nothing chained onto the forgery
    assert "differs from the database's record of it; not chaining onto it" in caplog.text
    assert len(await audit.query()) == 5  # the event itself is kept
    with pytest.raises(AuditExportMismatch):
        await verify_export(jsonl, sessions)


async def test_a_published_head_catches_a_rewrite_of_both_file_and_database(sessions, jsonl):  # noqa: F811
    await recorded(sessions, jsonl)
    head = await verify_export(jsonl, sessions)
    forged = rechain([line.replace(b"acme/r1", b"acme/zz") for line in jsonl.read_bytes().splitlines()])
    async with sessions() as session:  # the forger also holds the database, and re-seals the chain
        for seq, line in enumerate(forged, start=1):
            row = (await session.exec(select(AuditEvent).where(AuditEvent.seq == seq))).one()
            row.repository = json.loads(line)["repository"]
            row.line_hash = hashlib.sha256(line).hexdigest()
            session.add(row)
        chain = await session.get(AuditChain, 1)
        chain.line_hash = hashlib.sha256(forged[-1]).hexdigest()
        session.add(chain)
        await session.commit()
    write(jsonl, forged)
    await verify_export(jsonl, sessions)  # consistent with each other ...
    with pytest.raises(AuditExportMismatch, match=f"is not the published head {head}") as info:
        await verify_export(jsonl, sessions, expect=head)  # ... but not with what was published
    assert info.value.line == 4
    with pytest.raises(AuditExportMismatch, match="ends before the published head"):
        await verify_export(jsonl, sessions, expect=AuditHead(9, head.sha256))


def test_a_malformed_head_is_refused():
    with pytest.raises(ValueError, match="COUNT:SHA256"):
        parse_head("12:abc")


async def test_an_export_from_before_the_chain_moved_into_the_database_stays_valid(sessions, jsonl):  # noqa: F811
    """Events recorded before revision 0012 (or by a replica of the previous release) are unsealed rows; the
    first seal chains them in the order the existing export holds them, so that export keeps verifying."""
    async with sessions() as session:
        for i in range(3):
            session.add(AuditEvent(at=utcnow(), actor="ci", action="push", repository=f"acme/old{i}", detail="{}"))
        await session.commit()
        rows = {row.id: row for row in (await session.exec(select(AuditEvent))).all()}
    lines, prev = [], GENESIS
    for event_id in (2, 1, 3):  # the old export's order: concurrent appends landed out of id order
        lines.append(export_line(rows[event_id].to_dict(), prev))
        prev = hashlib.sha256(lines[-1]).hexdigest()
    write(jsonl, lines)
    await AuditLog(sessions, jsonl).record("ci", "push", repository="acme/new")
    assert jsonl.read_bytes().splitlines()[:3] == lines  # untouched, and extended
    report = await verify_trail(sessions, jsonl)
    assert report.head.count == 4 and report.appended == 0
