"""A mini-fleet (issue 32): four host stores on this machine (separate ``FORKD_HOME``s), each with its node agent
(``forkd node serve``) reporting to a real ``forkd-hub serve``, on SQLite and on PostgreSQL.

Two sibling chains share a base, and the second's link carries the first's numpy pages at other offsets:

    acme/py:pandas  base → numpy (+X at 8 MiB) → pandas (+Y)
    acme/py:scipy   base → scipy (+X at 16 MiB, +Z)

h1 holds the pandas chain, h2 the base, h3 nothing, h4 the scipy chain but in zone b. ``forkd place
acme/py:scipy --label zone=a`` ranks h1 (missing only Z and scipy's vmstate: X's chunks are held, in
numpy's layer), then h2 (X and Z), then h3 (everything), and excludes h4 for its label; the numbers are
checked against chunk sets computed here from the chunk maps. h1's ``forkd pull --json`` then moves exactly
the predicted frame bytes, and the predicted bytes plus the chain's manifests and maps in all; after its
agent reports again, h1 misses nothing.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from forkd_client.hub.client import HubClient
from forkd_client.hub.linkcheck import fetch_maps
from forkd_client.hub.pullstages import parse_link
from manifest.model import ChunkMap
from tests.e2e.hubproc import HubProcess, forkd
from tests.e2e.logscan import assert_no_traceback
from tests.e2e.test_push_pull_cli import User
from tests.hub_server.pushing import auth
from tests.services.readiness import wait_ready

pytestmark = pytest.mark.slow
MiB = 1 << 20
SIZE = 32 * MiB


def _image(path: Path, extents: list[tuple[int, bytes]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(SIZE)
        for offset, data in extents:
            f.seek(offset)
            f.write(data)


def make_siblings(root: Path) -> dict[str, Path]:
    """The four snapshot directories of the module docstring (deterministic bytes)."""
    rng = random.Random(32)
    base, x, y, z = (rng.randbytes(n) for n in (4 * MiB, 2 * MiB, MiB, MiB))
    layout = {
        "base": [(MiB, base)],
        "numpy": [(MiB, base), (8 * MiB, x)],
        "pandas": [(MiB, base), (8 * MiB, x), (12 * MiB, y)],
        "scipy": [(MiB, base), (16 * MiB, x), (20 * MiB, z)],
    }
    out = {}
    for name, extents in layout.items():
        _image(root / name / "memory.bin", extents)
        (root / name / "vmstate").write_bytes(f"vmstate-{name}".encode() * 700)
        out[name] = root / name
    return out


class Host:
    """One host: a store, a pull token for ``forkd pull``, and a node agent with its node token."""

    def __init__(self, root: Path, hub: HubProcess, name: str, zone: str) -> None:
        self.name, self.zone, self.root = name, zone, root
        self.user = User(root, hub)
        self.home = self.user.home
        self.pull_token = hub.token(f"{name}-pull", "pull:acme/*")
        self.node_token = hub.token(name, "node:acme/*")
        root.mkdir(parents=True, exist_ok=True)
        self.log = (root / "agent.log").open("w")
        self.agent = subprocess.Popen(
            forkd("node", "serve", "--host", name, "--label", f"zone={zone}", "--poll", "0.2", "--heartbeat", "30"),
            env={**self.user.env, "FORKD_TOKEN": self.node_token},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def pull(self, ref: str, *args: str) -> dict:
        self.user.env["FORKD_TOKEN"] = self.pull_token
        return json.loads(self.user.run("pull", ref, "--json", *args).stdout)

    def reported(self) -> bool:
        """Whether the agent's last report reflects the store as it is now."""
        try:
            state = json.loads((self.home / "node" / "state.json").read_text())
            changes = int((self.home / ".changes").read_text() or 0) if (self.home / ".changes").exists() else 0
        except (OSError, ValueError):
            return False
        return state.get("changes") == changes and state.get("host") == self.name

    def wait_reported(self) -> None:
        wait_ready(self.reported, what=f"the node agent of {self.name}", proc=self.agent, log=Path(self.log.name))

    def stop(self) -> None:
        self.agent.send_signal(signal.SIGTERM)
        try:
            code = self.agent.wait(timeout=60)
        finally:
            self.log.close()
        text = Path(self.log.name).read_text()
        assert_no_traceback(text, f"node agent {self.name}")
        assert code == 0, text[-2000:]
        assert "reported" in text and "stopped" in text, text[-2000:]


@pytest.fixture(params=["sqlite", "postgresql"])
def hub(request: pytest.FixtureRequest, tmp_path: Path):
    env = {}
    if request.param == "postgresql":
        env["FORKD_HUB_DATABASE_URL"] = request.getfixturevalue("postgres").create_database()
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log", env=env)
    yield h
    assert h.stop() == 0


def chunk_sets(client: HubClient, ref: str) -> list[tuple[str, dict[str, int], int]]:
    """Per link of ``ref``'s chain, base first: (digest, chunk digest → frame length, vmstate blob size)."""
    repo = client.repository("acme/py")
    out = []
    for link in repo.get_chain(ref):
        parsed = parse_link(link)
        maps: dict[str, ChunkMap] = fetch_maps(repo, *parsed)
        frames: dict[str, int] = {}
        for chunk_map in maps.values():
            for e in chunk_map.entries:
                if e.digest is not None:
                    frames.setdefault(e.digest, e.length)
        out.append((link.digest, frames, parsed[1].vmstate.size))
    return out


def test_place_ranks_the_fleet_and_the_top_host_pulls_exactly_what_it_missed(hub: HubProcess, tmp_path: Path):
    sources = make_siblings(tmp_path / "src")
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    alice.run("import", str(sources["base"]), "base")
    alice.run("import", str(sources["numpy"]), "numpy", "--parent", "base")
    alice.run("import", str(sources["pandas"]), "pandas", "--parent", "numpy")
    alice.run("import", str(sources["scipy"]), "scipy", "--parent", "base")
    for tag in ("base", "pandas", "scipy"):
        alice.run("push", tag, f"acme/py:{tag}", "--json")

    hosts: dict[str, Host] = {}
    try:
        for name, zone in (("h1", "a"), ("h2", "a"), ("h3", "a"), ("h4", "b")):
            hosts[name] = Host(tmp_path / name, hub, name, zone)
        hosts["h1"].pull("acme/py:pandas")
        hosts["h2"].pull("acme/py:base")
        hosts["h4"].pull("acme/py:scipy")
        for host in hosts.values():
            host.wait_reported()

        placed = json.loads(alice.run("place", "acme/py:scipy", "--label", "zone=a", "--json").stdout)

        checker = hub.token("checker", "pull:acme/*")
        with HubClient(hub.url, checker) as client:
            scipy = chunk_sets(client, "scipy")
            pandas = chunk_sets(client, "pandas")
            repo = client.repository("acme/py")
            layers = [x for d, _, _ in scipy for x in json.loads(repo.get_manifest(d)[0])["layers"]]
            maps = sum(len(repo.get_blob(x["digest"])) for x in layers if "chunkmap" in x["mediaType"])
            chain = len(httpx.get(f"{hub.url}/api/v1/repositories/acme/py/chain/scipy", headers=auth(checker)).content)
        (base_digest, base_frames, base_vm), (scipy_digest, scipy_frames, scipy_vm) = scipy
        numpy_frames = pandas[1][1]
        own_scipy = {d: n for d, n in scipy_frames.items() if d not in base_frames}
        held_by_h1 = {**base_frames, **numpy_frames, **pandas[2][1]}
        expected = {
            "h1": [0, sum(n for d, n in own_scipy.items() if d not in held_by_h1) + scipy_vm],
            "h2": [0, sum(own_scipy.values()) + scipy_vm],
            "h3": [sum(base_frames.values()) + base_vm, sum(own_scipy.values()) + scipy_vm],
        }
        # the dedup the ranking rests on: X's chunks sit in numpy's layer and again (elsewhere) in scipy's
        assert 0 < expected["h1"][1] < expected["h2"][1] < sum(expected["h3"])
        assert placed["digest"] == scipy_digest
        assert [link["digest"] for link in placed["chain"]] == [base_digest, scipy_digest]
        assert placed["totalBytes"] == sum(expected["h3"])
        assert [h["host"] for h in placed["ranked"]] == ["h1", "h2", "h3"]
        for ranked in placed["ranked"]:
            assert [link["missingBytes"] for link in ranked["links"]] == expected[ranked["host"]], ranked
            assert ranked["missingBytes"] == sum(expected[ranked["host"]])
            assert [link["held"] for link in ranked["links"]] == [ranked["host"] != "h3", False]
        assert placed["excluded"] == [{"host": "h4", "kind": "constraint", "reason": "label zone=b, not a"}]

        table = alice.run("place", "acme/py:scipy", "--label", "zone=a").stdout
        assert [line.split()[1] for line in table.splitlines()[2:5]] == ["h1", "h2", "h3"], table

        pulled = hosts["h1"].pull("acme/py:scipy", "--as", "scipy")
        predicted = placed["ranked"][0]
        frames = sum(link["bytes_fetched"] for link in pulled["links"])
        assert frames == predicted["missingBytes"] - scipy_vm  # the chunks: exactly
        assert [link["reused"] for link in pulled["links"]] == [True, False]
        # the rest: the chain's manifests and configs (one answer) and every link's chunk map (a v2 pull proves the
        # new link's file digest from its parent's chunk list too)
        overhead = pulled["bytes_received"] - predicted["missingBytes"]
        assert overhead == chain + maps, (overhead, chain, maps)

        hosts["h1"].wait_reported()
        again = json.loads(alice.run("place", "acme/py:scipy", "--hosts", "h1,h3,nosuch", "--json").stdout)
        assert [(h["host"], h["missingBytes"]) for h in again["ranked"]] == [("h1", 0), ("h3", sum(expected["h3"]))]
        assert again["excluded"] == [
            {"host": "nosuch", "kind": "unknown", "reason": "no inventory: this host never reported"}
        ]
    finally:
        for host in hosts.values():
            host.stop()
