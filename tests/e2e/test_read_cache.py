"""The read caches across processes: two ``forkd-hub serve`` replicas on one SQLite data dir, and ``--workers 2``.

A replica sees its own writes at once; the other replica sees a moved tag, a repository made
private and a revoked token once its cache TTL (1 s here) has passed. The polls below wait up
to 30 s for that: they check that the change arrives, never how fast.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess, forkd_hub
from tests.hub_server.api.test_read_cache import push_image

pytestmark = pytest.mark.slow


def eventually(probe: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {timeout} s")
        time.sleep(0.2)


def digest_of(url: str, ref: str, headers: dict[str, str] | None = None) -> str | int:
    r = httpx.get(f"{url}/v2/acme/vm/manifests/{ref}", headers=headers or {})
    return r.headers["Docker-Content-Digest"] if r.status_code == 200 else r.status_code


@pytest.fixture
def replicas(tmp_path: Path):
    env = {"FORKD_HUB_CACHE_TTL": "1"}
    hubs = [HubProcess(tmp_path / "hub", tmp_path / f"replica{i}.log", env=env) for i in range(2)]
    yield hubs
    for hub in hubs:
        assert hub.stop() == 0


def test_writes_reach_the_other_replica_within_its_ttl(replicas) -> None:
    a, b = replicas
    admin = {"Authorization": f"Bearer {a.token('admin', 'admin')}"}
    reader_secret = a.token("reader", "pull:acme/*")
    reader = {"Authorization": f"Bearer {reader_secret}"}
    with httpx.Client(base_url=a.url) as through_a:
        first = push_image(through_a, "acme/vm", "v1", 1, admin, public=True)
        assert digest_of(b.url, "v1") == first and digest_of(b.url, "v1", reader) == first  # B caches both
        second = push_image(through_a, "acme/vm", "v1", 2, admin)
        assert digest_of(a.url, "v1") == second  # the writer sees its write at once
        eventually(lambda: digest_of(b.url, "v1") == second, "moved on the other replica")

        httpx.patch(f"{a.url}/api/v1/repositories/acme/vm", json={"public": False}, headers=admin).raise_for_status()
        assert digest_of(a.url, "v1") == 401
        eventually(lambda: digest_of(b.url, "v1") == 401, "private on the other replica")
        assert digest_of(b.url, "v1", reader) == second

    revoked = subprocess.run(
        forkd_hub("token", "revoke", "reader"), env=a.env, capture_output=True, text=True, timeout=60
    )
    assert revoked.returncode == 0, revoked.stderr
    for hub in (a, b):
        eventually(lambda hub=hub: digest_of(hub.url, "v1", reader) == 401, f"revoked on {hub.url}")


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_serve_with_two_workers_answers_and_stops_cleanly(tmp_path: Path) -> None:
    hub = HubProcess(tmp_path / "hub", tmp_path / "hub.log", env={"FORKD_HUB_WORKERS": "2"})
    try:
        workers = _children(hub.proc.pid)
        assert len(workers) == 2, workers
        admin = {"Authorization": f"Bearer {hub.token('admin', 'admin')}"}
        with httpx.Client(base_url=hub.url) as http:
            first = push_image(http, "acme/vm", "v1", 1, admin, public=True)
            assert all(digest_of(hub.url, "v1") == first for _ in range(40))
    finally:
        code = hub.stop()
    assert code == 0
    assert all(not Path(f"/proc/{pid}").exists() for pid in workers)
    assert "with 2 workers" in Path(tmp_path / "hub.log").read_text()


def test_a_worker_that_dies_stops_the_whole_server(tmp_path: Path) -> None:
    hub = HubProcess(tmp_path / "hub", tmp_path / "hub.log", env={"FORKD_HUB_WORKERS": "2"})
    workers = _children(hub.proc.pid)
    subprocess.run(["kill", "-KILL", str(workers[0])], check=True)
    assert hub.proc.wait(timeout=60) == 1
    log = Path(tmp_path / "hub.log").read_text()
    assert "ended on its own" in log
    assert not Path(f"/proc/{workers[1]}").exists()  # stopped and reaped by the parent
    hub.stop()
