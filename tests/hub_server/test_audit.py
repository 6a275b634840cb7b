"""The audit log: database rows, queries, and the hash-chained JSONL export."""

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from hub_server.audit import GENESIS, AuditChainBroken, AuditLog, default_jsonl_path, verify_jsonl
from hub_server.auth.models import utcnow
from hub_server.db.engine import create_schema, make_engine, make_session_factory, sqlite_url

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator:
    engine = make_engine(sqlite_url(tmp_path))
    await create_schema(engine)
    yield make_session_factory(engine)
    await engine.dispose()


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    return default_jsonl_path(tmp_path)


async def test_record_writes_a_row_and_a_json_line(sessions, jsonl):
    audit = AuditLog(sessions, jsonl)
    await audit.record(
        "ci",
        "push",
        repository="acme/py",
        reference="v1",
        digest="blake3:" + "ab" * 32,
        remote="10.0.0.7",
        detail={"bytes": 123},
    )
    [event] = await audit.query()
    assert event["actor"] == "ci" and event["action"] == "push"
    assert event["repository"] == "acme/py" and event["reference"] == "v1"
    assert event["digest"] == "blake3:" + "ab" * 32 and event["remote"] == "10.0.0.7"
    assert event["detail"] == {"bytes": 123}
    assert event["at"].endswith("+00:00")

    [line] = jsonl.read_text().splitlines()
    exported = json.loads(line)
    assert exported.pop("prev") == GENESIS
    assert exported == event


async def test_query_filters_and_orders_newest_first(sessions, jsonl):
    audit = AuditLog(sessions, jsonl)
    await audit.record("ci", "push", repository="acme/a", reference="v1")
    await audit.record("ci", "tag", repository="acme/a", reference="latest")
    await audit.record("bob", "push", repository="acme/b")
    await audit.record("cli:root", "token.create", detail={"name": "ci"})

    assert [e["action"] for e in await audit.query()] == ["token.create", "push", "tag", "push"]
    assert [e["repository"] for e in await audit.query(action="push")] == ["acme/b", "acme/a"]
    assert [e["action"] for e in await audit.query(repository="acme/a")] == ["tag", "push"]
    assert [e["repository"] for e in await audit.query(actor="bob")] == ["acme/b"]
    assert len(await audit.query(limit=2)) == 2
    assert await audit.query(action="delete") == []
    with pytest.raises(ValueError, match="limit"):
        await audit.query(limit=0)


async def test_query_since(sessions, jsonl):
    now = utcnow()
    times = iter([now - timedelta(days=2), now - timedelta(hours=1)])
    audit = AuditLog(sessions, jsonl, clock=lambda: next(times))
    await audit.record("ci", "push", repository="old/one")
    await audit.record("ci", "push", repository="new/one")
    recent = await audit.query(since=now - timedelta(days=1))
    assert [e["repository"] for e in recent] == ["new/one"]
    with pytest.raises(ValueError, match="timezone"):
        await audit.query(since=now.replace(tzinfo=None))


async def test_export_is_appended_and_hash_chained(sessions, jsonl):
    jsonl.write_text("")  # an existing export is continued, never truncated
    audit = AuditLog(sessions, jsonl)
    for i in range(5):
        await audit.record("ci", "push", repository=f"acme/r{i}")
    assert verify_jsonl(jsonl) == 5

    # A second writer (the CLI, another process) continues the same chain.
    await AuditLog(sessions, jsonl).record("cli:root", "gc")
    assert verify_jsonl(jsonl) == 6


async def test_concurrent_records_keep_the_chain(sessions, jsonl):
    audit = AuditLog(sessions, jsonl)
    async with anyio.create_task_group() as group:
        for i in range(20):
            group.start_soon(lambda i=i: audit.record("ci", "push", repository=f"acme/r{i}"))
    assert verify_jsonl(jsonl) == 20
    assert len(await audit.query(limit=100)) == 20


@pytest.mark.parametrize("tamper", ["edit", "delete", "swap"])
async def test_tampering_with_the_export_is_detected(sessions, jsonl, tamper):
    audit = AuditLog(sessions, jsonl)
    for i in range(4):
        await audit.record("ci", "push", repository=f"acme/r{i}")
    lines = jsonl.read_text().splitlines()
    if tamper == "edit":
        lines[1] = lines[1].replace("acme/r1", "acme/zz")
    elif tamper == "delete":
        del lines[1]
    else:
        lines[1], lines[2] = lines[2], lines[1]
    jsonl.write_text("\n".join(lines) + "\n")
    with pytest.raises(AuditChainBroken) as info:
        verify_jsonl(jsonl)
    assert info.value.line in (2, 3)
    assert isinstance(info.value, ValueError)


async def test_a_torn_last_line_is_not_glued_to_the_next_record(sessions, jsonl):
    audit = AuditLog(sessions, jsonl)
    await audit.record("ci", "push", repository="acme/a")
    with jsonl.open("ab") as f:
        f.write(b'{"torn": ')  # a crash mid-write
    await audit.record("ci", "push", repository="acme/b")
    lines = jsonl.read_bytes().splitlines()
    assert lines[1] == b'{"torn": '
    assert json.loads(lines[2])["repository"] == "acme/b"
    with pytest.raises(AuditChainBroken) as info:
        verify_jsonl(jsonl)
    assert info.value.line == 2


async def test_a_long_previous_line_is_hashed_whole(sessions, jsonl):
    audit = AuditLog(sessions, jsonl)
    await audit.record("ci", "push", detail={"blob": "x" * 20_000})  # longer than one tail block
    await audit.record("ci", "push")
    assert verify_jsonl(jsonl) == 2


async def test_without_a_jsonl_path_only_rows_are_written(sessions, tmp_path):
    audit = AuditLog(sessions, None)
    await audit.record("anonymous", "visibility", repository="acme/a", detail={"public": True})
    assert [e["detail"] for e in await audit.query()] == [{"public": True}]
    assert not default_jsonl_path(tmp_path).exists()
