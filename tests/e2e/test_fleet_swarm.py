"""Three hosts of a fleet as processes pulling one chain at once (issue 33, part 4): each runs its node agent with
the peer service (``forkd node serve --peer-listen 127.0.0.1:0``) and starts ``forkd pull --peers --json`` at the
same time against a real ``forkd-hub serve`` (a 3 s cohort window). The hub names the three as one swarm, each pull
takes its share from the hub and the rest from the other hosts' agents, which serve what their running pulls
staged; all three install byte-identical files and the hub sends the chain's bytes well under three times."""

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
HOSTS = ("h1", "h2", "h3")


@pytest.fixture
def hub(tmp_path: Path):
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log", {"FORKD_HUB_SWARM_WINDOW": "3"})
    yield h
    assert h.stop() == 0


def test_three_hosts_pulling_at_once_trade_chunks_while_they_pull(hub: HubProcess, tmp_path: Path):
    sources = make_siblings(tmp_path / "src")
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    alice.run("import", str(sources["base"]), "base")
    alice.run("import", str(sources["numpy"]), "numpy", "--parent", "base")
    alice.run("push", "numpy", "acme/py:numpy", "--json")

    users, agents, logs = {}, {}, {}
    try:
        for host in HOSTS:
            users[host] = user = User(
                tmp_path / host,
                hub,
                FORKD_TOKEN=hub.token(f"{host}-pull", "pull:acme/*"),
                FORKD_FLEET_TOKEN=FLEET_TOKEN,
                FORKD_PEERS_HOST=host,
            )
            logs[host] = tmp_path / f"{host}-agent.log"
            with logs[host].open("w") as log:
                agents[host] = subprocess.Popen(
                    forkd("node", "serve", "--host", host, "--peer-listen", "127.0.0.1:0", "--poll", "0.2"),
                    env={**user.env, "FORKD_TOKEN": hub.token(host, "node:acme/*")},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        for host in HOSTS:
            state = users[host].home / "node" / "state.json"

            def reported(state: Path = state) -> bool:
                try:
                    return json.loads(state.read_text()).get("peer_url") is not None
                except (OSError, ValueError):
                    return False

            wait_ready(reported, what=f"host {host}'s node agent", proc=agents[host], log=logs[host])
        pulls = {host: users[host].start("pull", "acme/py:numpy", "--peers", "--json") for host in HOSTS}
        outputs = {host: proc.communicate(timeout=120) for host, proc in pulls.items()}
    finally:
        for agent in agents.values():
            agent.send_signal(signal.SIGTERM)
        codes = {host: agent.wait(timeout=60) for host, agent in agents.items()}
    results = {}
    for host, (out, err) in outputs.items():
        assert_no_traceback(out.decode() + err.decode(), f"forkd pull on {host}")
        assert pulls[host].returncode == 0, (host, err.decode()[-2000:])
        results[host] = json.loads(out)
        text = logs[host].read_text()
        assert_no_traceback(text, f"node agent {host}")
        assert codes[host] == 0, text[-2000:]

    tags = [link["tag"] for link in results["h1"]["links"]]
    for tag in tags:
        files = {(users[h].home / "snapshots" / tag / "memory.bin").read_bytes() for h in HOSTS}
        assert len(files) == 1, tag
    by = {host: r["bytes_by_source"] for host, r in results.items()}
    chain = by["h1"]["hub"] + by["h1"]["peers"]
    assert all(b["hub"] + b["peers"] == chain for b in by.values()), by
    assert all(r["swarm_size"] >= 2 for r in results.values()), {h: r["swarm_size"] for h, r in results.items()}
    assert sum(b["peers"] for b in by.values()) > 0, by
    # all three at once in one swarm: the hub sends the chain about once (a late starter costs it a share more)
    assert sum(b["hub"] for b in by.values()) <= 2 * chain, by
