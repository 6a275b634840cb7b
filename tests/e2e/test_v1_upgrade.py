"""A hub data dir written by the format-v1 code (tests/data/v1-hub.tar.gz) upgrades in place: the
new hub serves its v1 chain, the new client pulls it byte-exact and verifies it (v1 rules), and
pushing the pulled chain again makes a format-v2 chain beside it."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.test_push_pull_cli import User

pytestmark = pytest.mark.slow
DATA = Path(__file__).resolve().parents[1] / "data" / "v1-hub.tar.gz"


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    with tarfile.open(DATA) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "v1"


def test_a_v1_hub_upgrades_in_place_and_its_chain_still_pulls(v1: Path, tmp_path: Path):
    expected = json.loads((v1 / "expected.json").read_text())
    hub = HubProcess(v1 / "hub", tmp_path / "hub.log")  # serve migrates the embedded database on start
    try:
        r = httpx.get(
            f"{hub.url}/v2/acme/py/manifests/v1", headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}
        )
        assert r.status_code == 200 and r.headers["Docker-Content-Digest"] == expected["head"]
        assert json.loads(r.content)["artifactType"] == "application/vnd.forkd.snapshot.layer.v1"

        bob = User(tmp_path / "bob", hub)
        pulled = bob.json("pull", "acme/py:v1", "--as", "numpy")  # anonymous: the repository is public
        assert pulled["digest"] == expected["head"]
        assert [link["digest"] for link in pulled["links"]] == expected["links"]
        for src, tag in ((v1 / "src0", "base"), (v1 / "src1", "numpy")):
            for role in ("memory.bin", "vmstate"):
                assert (bob.home / "snapshots" / tag / role).read_bytes() == (src / role).read_bytes()
        assert bob.run("inspect", "numpy", "--verify", "--deep").returncode == 0

        # the same chain pushed again by the new client: a v2 chain (sha256, chunk trees) beside the v1 one
        bob.run("login", hub.url, "--token-stdin", input=hub.token("bob", "push:acme/*") + "\n")
        pushed = bob.json("push", "numpy", "acme/py:v2")
        assert pushed["digest"].startswith("sha256:") and pushed["digest"] != expected["head"]
        r = httpx.get(
            f"{hub.url}/v2/acme/py/manifests/v2", headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}
        )
        assert json.loads(r.content)["artifactType"] == "application/vnd.forkd.snapshot.layer.v2"
        carol = User(tmp_path / "carol", hub)
        assert carol.json("pull", "acme/py:v2", "--as", "numpy")["digest"] == pushed["digest"]
        assert (carol.home / "snapshots" / "numpy" / "memory.bin").read_bytes() == (
            v1 / "src1" / "memory.bin"
        ).read_bytes()
    finally:
        assert hub.stop() == 0
