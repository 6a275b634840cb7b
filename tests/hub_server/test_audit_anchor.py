"""Issue 16 item 3: the audit export is anchored to the database and to a publishable head."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import anyio
import pytest

from hub_server.audit import GENESIS, AuditEvent, AuditLog, verify_jsonl
from hub_server.audit_anchor import AuditExportMismatch, AuditHead, parse_head, verify_export
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


@pytest.mark.parametrize("forgery", ["edit-newest", "truncate-tail", "rechain-all", "add-line"])
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
        "truncate-tail": (3, "event 3 (push by ci at"),
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
    async with sessions() as session:  # the forger also holds the database
        row = await session.get(AuditEvent, 2)
        row.repository = "acme/zz"
        session.add(row)
        await session.commit()
    write(jsonl, rechain([line.replace(b"acme/r1", b"acme/zz") for line in jsonl.read_bytes().splitlines()]))
    await verify_export(jsonl, sessions)  # consistent with each other ...
    with pytest.raises(AuditExportMismatch, match=f"is not the published head {head}") as info:
        await verify_export(jsonl, sessions, expect=head)  # ... but not with what was published
    assert info.value.line == 4
    with pytest.raises(AuditExportMismatch, match="ends before the published head"):
        await verify_export(jsonl, sessions, expect=AuditHead(9, head.sha256))


def test_a_malformed_head_is_refused():
    with pytest.raises(ValueError, match="COUNT:SHA256"):
        parse_head("12:abc")
