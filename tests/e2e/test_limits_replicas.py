"""Tenant limits across two ``forkd-hub serve`` replicas on one PostgreSQL and one S3 (docs/limits.md).

Counted limits (tags, referrers, repositories) and storage quotas live in the database, so they hold across
replicas; rate
limits are per replica by design, so one client gets at most twice a bucket from two replicas, never more.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess, forkd_hub

pytestmark = pytest.mark.slow


@pytest.fixture
def replicas(tmp_path: Path, postgres, seaweedfs):
    env = {
        "FORKD_HUB_DATABASE_URL": postgres.create_database(empty=True),
        "FORKD_HUB_STORAGE": seaweedfs.storage_spec(),
        "FORKD_HUB_TAGS_PER_REPOSITORY": "2",
        "FORKD_HUB_RATE_ANONYMOUS": "1/h,5",  # no refill while the test runs: exactly the burst
        "FORKD_HUB_RATE_TOKEN": "1/h,40",
    }
    migrated = subprocess.run(
        forkd_hub("migrate"),
        env={**os.environ, **env, "FORKD_HUB_DATA_DIR": str(tmp_path / "cli")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stderr
    hubs = [HubProcess(tmp_path / f"replica{i}", tmp_path / f"replica{i}.log", env=env) for i in range(2)]
    yield hubs
    for hub in hubs:
        assert hub.stop() == 0


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_counted_limits_hold_across_replicas_and_rates_are_per_replica(replicas):
    first, second = replicas
    token = first.token("ci", "push:acme/*")
    headers = {"Authorization": f"Bearer {token}"}
    config = b"{}"
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.example.note",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": _digest(config), "size": 2},
            "layers": [],
        }
    ).encode()
    with httpx.Client(timeout=60) as http:
        r = http.post(
            f"{first.url}/v2/acme/t/blobs/uploads/", params={"digest": _digest(config)}, content=config, headers=headers
        )
        assert r.status_code == 201, r.text
        put = {**headers, "Content-Type": "application/vnd.oci.image.manifest.v1+json"}
        assert http.put(f"{first.url}/v2/acme/t/manifests/a", content=manifest, headers=put).status_code == 201
        assert http.put(f"{second.url}/v2/acme/t/manifests/b", content=manifest, headers=put).status_code == 201
        for hub in (first, second):  # the third tag is refused whichever replica is asked
            r = http.put(f"{hub.url}/v2/acme/t/manifests/c", content=manifest, headers=put)
            assert r.status_code == 403 and r.json()["errors"][0]["code"] == "QUOTA_EXCEEDED", r.text

        # a storage quota set through one replica holds on the other (it lives in the database)
        admin = {"Authorization": f"Bearer {first.token('admin', 'admin')}"}
        used = http.get(f"{first.url}/api/v1/namespaces/acme/quota", headers=admin).json()["usedBytes"]
        r = http.put(f"{first.url}/api/v1/namespaces/acme/quota", json={"quotaBytes": used}, headers=admin)
        assert r.status_code == 200 and r.json()["quotaBytes"] == used
        r = http.post(f"{second.url}/v2/acme/other/blobs/uploads/", headers=headers)
        assert r.status_code == 403 and r.json()["errors"][0]["detail"]["quota"] == "storage", r.text
        shown = http.get(f"{second.url}/api/v1/namespaces/acme/quota", headers=headers).json()
        assert shown == {"namespace": "acme", "quotaBytes": used, "usedBytes": used, "source": "namespace"}

        # anonymous: each replica lets exactly its burst through, then answers 429 with Retry-After
        for hub in (first, second):
            answers = [http.get(f"{hub.url}/v2/").status_code for _ in range(7)]
            assert answers[:5] == [401] * 5 and answers[5:] == [429, 429], answers
            r = http.get(f"{hub.url}/v2/")
            assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
            assert r.json()["errors"][0]["code"] == "TOOMANYREQUESTS"
        # the token's requests are still served: anonymous traffic from the same address did not use them
        assert http.get(f"{second.url}/v2/", headers=headers).status_code == 200
