"""``forkd-hub serve --mirror-of URL`` as a real process: a pull through it, then the mirror restarted while the
upstream is down: what it cached still pulls, what it did not is one clear 503 naming the upstream, and
neither log holds a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from forkd_client.hub.client import HubClient
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore
from tests.e2e.hubproc import HubProcess
from tests.forkd_client.snapshots import make_base_source, make_link_source

REF = Reference.parse("team/py:v1")


def installed(store: SnapshotStore) -> dict[str, bytes]:
    root = store.root / "snapshots"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("memory.bin"))}


def test_a_restarted_mirror_serves_its_cache_while_the_upstream_is_down(tmp_path: Path) -> None:
    upstream = HubProcess(tmp_path / "up", tmp_path / "up.log")
    mirror_args = ("--mirror-of", upstream.url, "--mirror-tag-ttl", "0")  # every tag read asks the upstream
    mirror = HubProcess(tmp_path / "mirror", tmp_path / "mirror.log", args=mirror_args)
    try:
        token = upstream.token("ci", "push:team/*")
        with SnapshotStore(tmp_path / "src") as src:
            base = make_base_source(tmp_path / "s0", seed=1)
            src.import_snapshot(base, "base")
            src.import_snapshot(make_link_source(tmp_path / "s1", base / "memory.bin", seed=2), "head", parent="base")
            with HubClient(upstream.url, token) as client:
                push(src, client, "head", REF)
        with HubClient(mirror.url, token) as client, SnapshotStore(tmp_path / "a") as first:
            pull(first, client, REF, as_tag="py")
            expected = installed(first)
        assert mirror.stop() == 0
        assert upstream.stop() == 0

        mirror = HubProcess(tmp_path / "mirror", tmp_path / "mirror.log", args=mirror_args)
        with HubClient(mirror.url, token) as client, SnapshotStore(tmp_path / "b") as again:
            pull(again, client, REF, as_tag="py")
            assert installed(again) == expected
        r = httpx.get(f"{mirror.url}/v2/team/py/manifests/v2", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 503
        message = r.json()["errors"][0]["message"]
        assert f"cannot reach its upstream {upstream.url}" in message
        assert "Stale" in httpx.get(
            f"{mirror.url}/api/v1/repositories/team/py/chain/v1", headers={"Authorization": f"Bearer {token}"}
        ).headers.get("warning", "")
        health = json.loads(httpx.get(f"{mirror.url}/healthz").text)
        assert health["status"] == "ok" and health["upstream"].startswith("unreachable")
        assert r.request.url.path in mirror.log()  # the refusal is in the access log, as one line
    finally:
        if mirror.proc.poll() is None:
            assert mirror.stop() == 0  # no traceback in its log (HubProcess.stop)
        if upstream.proc.poll() is None:
            upstream.stop()
