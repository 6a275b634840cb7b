"""Two hosts of a fleet as processes (issue 33, part 2): host a's node agent (``forkd node serve --peer-listen
127.0.0.1:0``) reports its peer URL to a real ``forkd-hub serve``; host b's ``forkd pull --peers --json`` takes the
chain's chunks from a, byte-identical, and says so in ``bytes_by_source``. The agent without a fleet token refuses to
start, with a clear message and no traceback; SIGTERM stops the peer service with the agent."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess, forkd
from tests.e2e.logscan import assert_no_traceback
from tests.e2e.test_fleet_placement import make_siblings
from tests.e2e.test_push_pull_cli import User
from tests.services.readiness import wait_ready

pytestmark = pytest.mark.slow
FLEET_TOKEN = "e2e-fleet-token"


@pytest.fixture
def hub(tmp_path: Path):
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield h
    assert h.stop() == 0


def test_a_host_pulls_the_chain_from_its_peer_and_installs_the_same_bytes(hub: HubProcess, tmp_path: Path):
    sources = make_siblings(tmp_path / "src")
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    alice.run("import", str(sources["base"]), "base")
    alice.run("import", str(sources["numpy"]), "numpy", "--parent", "base")
    alice.run("push", "numpy", "acme/py:numpy", "--json")

    a = User(tmp_path / "a", hub, FORKD_TOKEN=hub.token("a-pull", "pull:acme/*"))
    a.run("pull", "acme/py:numpy", "--json")
    refused = a.run("node", "serve", "--host", "a", "--peer-listen", "127.0.0.1:0", check=False)
    assert refused.returncode != 0 and "FORKD_FLEET_TOKEN" in refused.stderr, refused.stderr

    log_path = tmp_path / "a-agent.log"
    with log_path.open("w") as log:
        agent = subprocess.Popen(
            forkd("node", "serve", "--host", "a", "--peer-listen", "127.0.0.1:0", "--poll", "0.2"),
            env={**a.env, "FORKD_TOKEN": hub.token("a", "node:acme/*"), "FORKD_FLEET_TOKEN": FLEET_TOKEN},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def reported() -> bool:
            try:
                return json.loads((a.home / "node" / "state.json").read_text()).get("layers") is not None
            except (OSError, ValueError):
                return False

        wait_ready(reported, what="host a's node agent", proc=agent, log=log_path)
        b = User(tmp_path / "b", hub, FORKD_TOKEN=hub.token("b-pull", "pull:acme/*"), FORKD_FLEET_TOKEN=FLEET_TOKEN)
        pulled = json.loads(b.run("pull", "acme/py:numpy", "--peers", "--json").stdout)
        human = b.run("pull", "acme/py:numpy", "--peers", "--as", "again", "--force")
    finally:
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(timeout=60)
    text = log_path.read_text()
    assert_no_traceback(text, "node agent a")
    assert code == 0, text[-2000:]
    assert "serving verified chunks to fleet peers at http://127.0.0.1:" in text and "peer server stopped" in text

    by = pulled["bytes_by_source"]
    assert by["peers"] > 0 and by["hub"] == 0, pulled
    (peer,) = pulled["bytes_by_peer"]
    assert peer.startswith("http://127.0.0.1:") and pulled["peers_dropped"] == {}
    tags = [link["tag"] for link in pulled["links"]]
    assert len(tags) == 2
    for tag in tags:
        assert (b.home / "snapshots" / tag / "memory.bin").read_bytes() == (
            a.home / "snapshots" / tag / "memory.bin"
        ).read_bytes()
    assert "chunks by source:" in human.stdout, human.stdout
