"""``forkd pull`` through a pull-through mirror (``forkd-hub serve --mirror-of``): the same snapshots, byte for
byte, as a pull from the upstream itself, and a signed head still verifies (``--verify-key``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from litestar.testing import TestClient

from forkd_client.hub.client import HubClient
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore
from hub_server.app import create_app
from hub_server.settings import Settings
from tests.services.servedapp import ServedHub
from tests.services.sqlite import seed

REF = Reference.parse("team/py:v1")


@pytest.fixture
def upstream(tmp_path: Path, sqlite_template: Path) -> Iterator[ServedHub]:
    settings = replace(Settings.for_data_dir(tmp_path / "up"), storage=f"filesystem root={tmp_path / 'up' / 'blobs'}")
    seed(tmp_path / "up", sqlite_template)
    hub = ServedHub(settings)
    yield hub
    hub.stop()


@pytest.fixture
def mirror(tmp_path: Path, upstream: ServedHub) -> Iterator[TestClient[Any]]:
    settings = Settings.for_data_dir(tmp_path / "mirror", mirror_of=upstream.url)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def snapshot_files(store: SnapshotStore) -> dict[str, object]:
    """Every installed file's bytes; of the JSON records, what does not name a time, a path or the hub's URL."""
    root = store.root / "snapshots"
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name == "snapshot.json":  # forkd's record: local paths only
            continue
        if p.name == "forkd-hub.json":
            record = json.loads(p.read_bytes())
            out[str(p.relative_to(root))] = (
                record["files"],
                record["parent_tag"],
                record["origin"]["manifest_digest"],
                record.get("parent_chunk_tree"),
            )
        else:
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_a_pull_through_the_mirror_installs_the_same_bytes_and_still_verifies(
    chain3: SnapshotStore, upstream: ServedHub, mirror: TestClient[Any], tmp_path: Path
) -> None:
    pull_both_ways(chain3, upstream, mirror, tmp_path)


def test_a_pull_through_a_mirror_of_an_s3_hub_onto_s3(
    chain3: SnapshotStore, seaweedfs: Any, tmp_path: Path, sqlite_template: Path
) -> None:
    """The upstream answers blob reads with 307s to presigned S3 URLs; the mirror follows them (plain bytes, not
    the fetch-plan type) and keeps what it fetched in its own S3 store."""
    up = replace(Settings.for_data_dir(tmp_path / "up"), storage=seaweedfs.storage_spec())
    seed(tmp_path / "up", sqlite_template)
    hub = ServedHub(up)
    try:
        settings = Settings.for_data_dir(tmp_path / "mirror", mirror_of=hub.url, storage=seaweedfs.storage_spec())
        with TestClient(create_app(settings), raise_server_exceptions=False) as mirror:
            pull_both_ways(chain3, hub, mirror, tmp_path)
    finally:
        hub.stop()


def pull_both_ways(chain3: SnapshotStore, upstream: ServedHub, mirror: TestClient[Any], tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    token = upstream.token("ci", "push:team/*")
    with HubClient(upstream.url, token) as direct:
        push(chain3, direct, "head", REF, sign=key)
        with SnapshotStore(tmp_path / "direct") as here:
            pull(here, direct, REF, as_tag="py")
            expected = snapshot_files(here)
    through = HubClient(str(mirror.base_url), token, http=mirror)
    with SnapshotStore(tmp_path / "mirrored") as there:
        pulled = pull(there, through, REF, as_tag="py", verify_keys=[key.public_key()])
        assert pulled.signed_by is not None
        assert snapshot_files(there) == expected
    assert len(expected) == 12  # 3 links: memory.bin, its .entries, vmstate, forkd-hub.json
    metrics = mirror.get("/metrics").text
    assert 'forkd_mirror_upstream_fetches_total{kind="blob"}' in metrics
