"""Issue 28 item 3: a full object store is seen by ``/healthz``, and pushes get a 503 naming it, never a 500.

A small SeaweedFS (4 volumes of 8 MiB) behind the documented deployment; the test fills it the way data does
(objects written until the store refuses), then asks each replica's ``/healthz``, a push through the load
balancer, and an upload straight to a replica. A full SeaweedFS still answers reads: only a write shows it.
"""

from __future__ import annotations

import os
import ssl
import time

import httpx
import pytest
from botocore.exceptions import ClientError

from manifest.digest import digest_bytes
from tests.e2e.deployment import Deployment
from tests.e2e.test_push_pull_cli import MiB, make_sources

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operations-full-store")]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    d = Deployment(tmp_path_factory.mktemp("full"), weed={"volume_size_mb": 8, "max_volumes": 4}).start()
    yield d
    d.stop()


def _fill(deployment: Deployment) -> int:
    """Write filler objects into the hub's bucket until the store refuses one; return how many fit."""
    client = deployment.seaweedfs.client()
    filler = os.urandom(MiB)
    for count in range(1000):
        try:
            client.put_object(Bucket=deployment.seaweedfs.bucket, Key=f"filler/{count}", Body=filler)
        except ClientError:
            return count
    pytest.fail("the store never filled up")


def test_a_full_store_fails_healthz_and_pushes_are_refused_with_503(deployment, tmp_path):
    token = deployment.token("ci", "push:acme/*")
    frank = deployment.user("frank", token, FORKD_RETRY_FOR="8")
    [source] = make_sources(tmp_path / "src", data_mib=1)[:1]
    frank.run("import", str(source), "base")
    frank.run("push", "base", "acme/before:v1")  # a store with room takes pushes
    for index in (0, 1):
        assert httpx.get(deployment.replica(index).url + "/healthz", timeout=60).status_code == 200

    assert _fill(deployment) > 0
    for index in (0, 1):  # each replica sees it within its write-probe interval (5 s)
        url = deployment.replica(index).url + "/healthz"
        deadline = time.monotonic() + 120
        while (health := httpx.get(url, timeout=60)).status_code == 200:
            assert time.monotonic() < deadline, "healthz never saw the full store"
            time.sleep(1)
        assert health.status_code == 503 and health.json()["database"] == "ok", health.text
        assert health.json()["storage"].startswith("error: writes fail:"), health.text

    # the load balancer takes both replicas out after its own checks fail (deploy/haproxy.cfg: every 2 s, twice)
    deadline = time.monotonic() + 120
    while (
        httpx.get(
            deployment.url + "/healthz",
            timeout=60,
            verify=ssl.create_default_context(cafile=str(deployment.lb.ca_file)),
        ).status_code
        != 503
    ):
        assert time.monotonic() < deadline, "the load balancer never took the replicas out"
        time.sleep(1)
    # new bytes (a base already stored is mounted, and a push that writes nothing needs no room)
    [fresh] = make_sources(tmp_path / "fresh", data_mib=1)[:1]
    frank.run("import", str(fresh), "fresh")
    refused = frank.run("push", "fresh", "acme/after:v1", check=False)
    assert refused.returncode == 5, refused.stderr  # retryable: the load balancer has no healthy replica
    assert "unavailable" in refused.stderr and "Traceback" not in refused.stderr

    data = os.urandom(256 << 10)  # the hub's own answer, asked directly
    direct = httpx.post(
        deployment.replica(0).url + "/v2/acme/direct/blobs/uploads/",
        params={"digest": str(digest_bytes(data))},
        content=data,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    )
    assert direct.status_code == 503, direct.text
    [error] = direct.json()["errors"]
    assert error["code"] == "UNAVAILABLE" and error["detail"]["dependency"] == "storage"
    assert direct.headers["Retry-After"] == "5"
    for index in (0, 1):
        log = deployment.replica(index).log()
        assert "Traceback" not in log and '"status": 500' not in log and '"status":500' not in log
