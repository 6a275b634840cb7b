"""Issue 28 items 1, 2, 5 and 7 on a real deployment: PostgreSQL, SeaweedFS, two replicas, HAProxy with TLS.

Faults are injected by stopping and starting the processes (tests/e2e/deployment.py); clients reach the hub
only through the load balancer. What must hold:

1. a replica killed mid-push leaves an upload session whose lease runs out in seconds: the CI's immediate
   retry resumes it (and the client itself rides a kill out while ``FORKD_RETRY_FOR`` allows);
2. a push while PostgreSQL is down is a 503 the client classes as retryable (exit 5), never a 500; each replica
   logs the outage once and its end once, never a traceback; a push the outage interrupts finishes;
5. the audit trail verifies for the deployment as a whole, on every replica's export;
7. ``forkd-hub token``/``gc``/``verify``/``audit`` run on a host without a data directory.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.deployment import Deployment
from tests.e2e.test_push_pull_cli import MiB, User, make_sources

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operations-faults")]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    d = Deployment(tmp_path_factory.mktemp("deployment")).start()
    yield d
    d.stop()


def _query(deployment: Deployment, sql: str) -> list[tuple]:
    import asyncpg

    async def go() -> list[tuple]:
        conn = await asyncpg.connect(
            host="127.0.0.1", port=deployment.postgres.port, user="hub", password="secret", database="forkd_hub"
        )
        try:
            return [tuple(row) for row in await conn.fetch(sql)]
        finally:
            await conn.close()

    return asyncio.run(go())


def _wait_for_upload(deployment: Deployment, push, committed: int) -> None:
    """Until a request holds an upload session's lease with at least ``committed`` bytes in it."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert push.poll() is None, f"the push ended first: {push.stderr.read().decode()[-2000:]}"
        rows = _query(deployment, "SELECT size FROM uploads WHERE lease_owner IS NOT NULL")
        if any(size >= committed for (size,) in rows):
            return
        time.sleep(0.05)
    pytest.fail("no upload reached the committed size")


def _same_files(user: User, tag: str, source: Path) -> None:
    for role in ("memory.bin", "vmstate"):
        assert (user.home / "snapshots" / tag / role).read_bytes() == (source / role).read_bytes(), (tag, role)


def _access_statuses(log: str) -> list[int]:
    return [int(s) for s in re.findall(r'"status": ?(\d{3})', log)]


def test_a_ci_retry_right_after_its_replica_was_killed_mid_push_resumes_the_upload(deployment, tmp_path):
    token = deployment.token("ci-crash", "push:acme/*")
    alice = deployment.user("alice", token, FORKD_UPLOAD_PART_BYTES=str(MiB), FORKD_RETRY_FOR="0")
    [source] = make_sources(tmp_path / "src", data_mib=24)[:1]
    alice.run("import", str(source), "base")
    deployment.stop_replica(1)  # the push is served by replica 0, which dies mid-upload
    push = alice.start("push", "base", "acme/crash:v1", "--json")
    _wait_for_upload(deployment, push, 8 * MiB)
    deployment.kill(0)
    assert push.wait(timeout=300) == 5, push.stderr.read().decode()  # no retries allowed: the CI sees a failure
    for index in (0, 1):
        deployment.start_replica(index)

    alice.env["FORKD_RETRY_FOR"] = "60"  # the CI's retry, at once, through the same URL
    retry = alice.run("push", "base", "acme/crash:v1", "--json")
    waits = [int(w) for w in re.findall(r"BLOB_UPLOAD_BUSY|retry in (\d+) s", retry.stderr) if w]
    assert all(w <= 15 for w in waits), retry.stderr  # a dead replica's lease outlives it by seconds (15 s lease)
    sent = json.loads(retry.stdout)["bytes_sent"]
    assert sent < 18 * MiB, sent  # resumed where the hub had committed (>= 8 MiB of ~24), not started over

    bob = deployment.user("bob", deployment.token("bob-crash", "pull:acme/*"))
    bob.run("pull", "acme/crash:v1", "--as", "base")
    _same_files(bob, "base", source)


def test_a_push_while_the_database_is_down_exits_5_and_replicas_log_the_outage_once(deployment, tmp_path):
    token = deployment.token("ci-db", "push:acme/*")
    carol = deployment.user("carol", token, FORKD_RETRY_FOR="6")
    [source] = make_sources(tmp_path / "src", data_mib=2)[:1]
    carol.run("import", str(source), "base")
    marks = [len(deployment.replica(i).log()) for i in (0, 1)]
    deployment.postgres.halt()
    try:
        refused = carol.run("push", "base", "acme/outage:v1", check=False)
        assert refused.returncode == 5, refused.stderr
        assert "unavailable" in refused.stderr and "retry later" in refused.stderr
        assert "internal server error" not in refused.stderr
        health = httpx.get(deployment.replica(0).url + "/healthz", timeout=60)
        assert health.status_code == 503 and health.json()["database"].startswith("error:"), health.text
        assert health.json()["storage"] == "ok"
        time.sleep(5)  # a few rounds of the webhook loop and of the load balancer's health checks
    finally:
        deployment.postgres.resume()
    for index in (0, 1):
        hub = deployment.replica(index)
        deadline = time.monotonic() + 120
        while httpx.get(hub.url + "/healthz", timeout=60).status_code != 200:
            assert time.monotonic() < deadline, "the replica never saw the database again"
            time.sleep(0.5)
        log = hub.log()[marks[index] :]
        assert "Traceback" not in log and "webhook delivery loop failed" not in log
        assert log.count("database unavailable:") == 1, log[-3000:]  # one line for the whole outage
        assert log.count("database available again after") == 1, log[-3000:]
        assert 500 not in _access_statuses(log)
    carol.env["FORKD_RETRY_FOR"] = "60"
    carol.run("push", "base", "acme/outage:v1")


def test_a_push_the_database_outage_interrupts_finishes(deployment, tmp_path):
    token = deployment.token("ci-blip", "push:acme/*")
    dave = deployment.user("dave", token, FORKD_UPLOAD_PART_BYTES=str(MiB))
    [source] = make_sources(tmp_path / "src", data_mib=48)[:1]  # 1 MiB parts: the push outlasts the outage
    dave.run("import", str(source), "base")
    marks = [len(deployment.replica(i).log()) for i in (0, 1)]
    push = dave.start("push", "base", "acme/blip:v1", "--json")
    _wait_for_upload(deployment, push, 4 * MiB)
    deployment.postgres.halt()
    time.sleep(3)  # the outage: requests in flight fail, the client keeps retrying
    assert push.poll() is None, "the push ended before the outage could interrupt it"
    deployment.postgres.resume()
    _, err = push.communicate(timeout=600)
    assert push.returncode == 0, err.decode()[-3000:]
    assert "retrying" in err.decode()  # it did see the outage
    for index in (0, 1):
        log = deployment.replica(index).log()[marks[index] :]
        assert "Traceback" not in log and 500 not in _access_statuses(log), log[-3000:]
    erin = deployment.user("erin", deployment.token("erin-blip", "pull:acme/*"))
    erin.run("pull", "acme/blip:v1", "--as", "base")
    _same_files(erin, "base", source)


def test_operator_commands_run_without_a_data_dir_and_the_audit_trail_verifies_on_every_replica(deployment):
    """Items 5 and 7: every replica appended to its own export; each verifies against the deployment's chain
    (and is the same file); the operator's host has no data directory at all."""
    for args in (("gc", "--dry-run"), ("verify",), ("audit", "--verify"), ("token", "list")):
        done = deployment.cli(*args)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert not (deployment.root / "operator-has-no-data-dir").exists()
    heads = []
    for index in (0, 1):
        hub = deployment.replica(index)
        done = deployment.cli("audit", "--verify", "--export", str(hub.data_dir / "audit.jsonl"))
        assert done.returncode == 0, done.stderr
        heads.append(re.search(r"head (\d+:[0-9a-f]{64})", done.stdout).group(1))
    assert heads[0] == heads[1]
    exports = [deployment.replica(i).data_dir / "audit.jsonl" for i in (0, 1)]
    assert exports[0].read_bytes() == exports[1].read_bytes()
    actions = {json.loads(line)["action"] for line in exports[0].read_text().splitlines()}
    assert {"push", "tag", "token.create"} <= actions
