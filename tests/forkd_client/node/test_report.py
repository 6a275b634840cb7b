"""The node agent's inventory and reports against a real hub in-process (forkd_client/node/): what a store says it
holds, the full/delta protocol, refused layers, and a partly pulled or lazily staged chain whose resumed pull
moves exactly what placement predicted."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

import blake3
import pytest

from forkd_client.cli.main import main
from forkd_client.hub.lazystate import PRESENT_SUFFIX, state_dir, write_chunk_list, write_head_marker
from forkd_client.hub.progress import Progress
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.node.agent import AgentBusy, NodeAgent, ReportService
from forkd_client.node.inventory import scan_inventory
from forkd_client.node.report import Reporter
from forkd_client.node.state import read_state
from forkd_client.store import SnapshotStore
from manifest import mediatypes as mt
from tests.forkd_client.hub.conftest import InProcessHub

CHUNK = 64 << 10
VMMS = [
    {
        "vmm": "qemu-microvm",
        "vmmVersion": "7.2.22",
        "machine": "microvm",
        "accel": "tcg",
        "arch": "x86_64",
        "cpu": "max",
    }
]


def dense_chain(root: Path, store: SnapshotStore) -> None:
    """base (48 random chunks) ← head (12 of them rewritten, 4 new): enough frames to interrupt a pull between."""
    rng = random.Random(7)
    base = root / "base"
    base.mkdir(parents=True)
    data = bytearray(rng.randbytes(48 * CHUNK)) + bytes(16 * CHUNK)
    (base / "memory.bin").write_bytes(data)
    (base / "vmstate").write_bytes(b"base-state" * 300)
    head = root / "head"
    head.mkdir()
    for i in (*range(0, 48, 4), *range(48, 52)):
        data[i * CHUNK : (i + 1) * CHUNK] = rng.randbytes(CHUNK)
    (head / "memory.bin").write_bytes(data)
    (head / "vmstate").write_bytes(b"head-state" * 300)
    store.import_snapshot(base, "base")
    store.import_snapshot(head, "head", parent="base")


@pytest.fixture
def hub_with_chain(inproc_hub: InProcessHub, tmp_path: Path) -> InProcessHub:
    with SnapshotStore(tmp_path / "pusher") as pusher:
        dense_chain(tmp_path / "src", pusher)
        push(pusher, inproc_hub.client(inproc_hub.token("ci", "push:acme/*")), "head", Reference.parse("acme/py:head"))
    return inproc_hub


def reporter(hub: InProcessHub, store: SnapshotStore, host: str = "h", token: str | None = None) -> Reporter:
    token = token or hub.token(host, "node:acme/*")
    return Reporter(store, hub.client(token), host, labels={"zone": "a"}, vmms=VMMS)


def placed(hub: InProcessHub, host: str = "h") -> dict:
    answer = hub.client(hub.token(f"placer-{os.urandom(3).hex()}", "pull:acme/*")).placement(
        {"reference": "acme/py:head", "hosts": [host]}
    )
    (ranked,) = answer["ranked"]
    return {**answer, "host": ranked}


class Interrupt(Progress):
    """Fails the pull once ``after`` pieces were verified (what a dropped connection does)."""

    def __init__(self, after: int) -> None:
        self.left = after

    def advance(self, nbytes: int) -> None:
        self.left -= 1
        if self.left < 0:
            raise ConnectionError("the link went down")


def test_a_store_reports_the_layers_it_pulled_from_this_hub_while_their_files_are_unchanged(
    hub_with_chain: InProcessHub, other_store: SnapshotStore
) -> None:
    hub = hub_with_chain
    result = pull(other_store, hub.client(hub.token("reader", "pull:acme/*")), Reference.parse("acme/py:head"))
    layers = {link.digest for link in result.links}
    assert scan_inventory(other_store, str(hub.http.base_url)).layers == layers
    assert scan_inventory(other_store, "http://elsewhere.example:8080").layers == frozenset()
    with open(other_store.path(result.tag) / mt.MEMORY_FILE, "r+b") as f:  # changed behind the store's back
        f.write(b"tampered")
    assert scan_inventory(other_store, str(hub.http.base_url)).layers == layers - {result.digest}


def test_reports_are_full_then_deltas_and_stale_deltas_turn_full(
    hub_with_chain: InProcessHub, other_store: SnapshotStore, tmp_path: Path
) -> None:
    hub = hub_with_chain
    agent = reporter(hub, other_store)
    first = agent.report()
    assert (first.mode, first.generation, first.layers) == ("full", 1, 0)
    pulled = pull(other_store, hub.client(hub.token("reader", "pull:acme/*")), Reference.parse("acme/py:head"))
    second = agent.report()
    assert (second.mode, second.generation, second.layers, second.changes) == ("delta", 2, 2, other_store.changes())
    other_store.remove(pulled.tag)
    third = agent.report()
    assert (third.mode, third.layers) == ("delta", 1)
    assert read_state(other_store)["layers"] == [pulled.links[0].digest]
    # another agent (another store, same host and token) reported meanwhile: the hub refuses the delta
    # against the generation it replaced, and the agent sends everything
    with SnapshotStore(tmp_path / "impostor") as elsewhere:
        assert Reporter(elsewhere, agent.client, "h", vmms=VMMS).report().generation == 4
    fourth = agent.report()
    assert (fourth.mode, fourth.generation, fourth.layers) == ("full", 5, 1)
    # a state file that claims a generation the hub never answered: the same
    state = json.loads((other_store.root / "node" / "state.json").read_text())
    state["generation"] = 99
    (other_store.root / "node" / "state.json").write_text(json.dumps(state))
    fifth = agent.report()
    assert (fifth.mode, fifth.layers) == ("full", 1)


def test_layers_the_hub_refuses_are_left_out_and_remembered(
    hub_with_chain: InProcessHub, other_store: SnapshotStore, tmp_path: Path
) -> None:
    hub = hub_with_chain
    with SnapshotStore(tmp_path / "pusher2") as elsewhere:
        src = tmp_path / "other-src"
        src.mkdir()
        (src / "memory.bin").write_bytes(random.Random(9).randbytes(2 * CHUNK))
        (src / "vmstate").write_bytes(b"other")
        elsewhere.import_snapshot(src, "other")
        push(elsewhere, hub.client(hub.token("ci2", "push:team/*")), "other", Reference.parse("team/x:v1"))
    reader = hub.client(hub.token("reader", "pull:acme/*", "pull:team/*"))
    pull(other_store, reader, Reference.parse("acme/py:head"))
    team = pull(other_store, reader, Reference.parse("team/x:v1"))
    agent = reporter(hub, other_store)  # a node token for acme/* only
    outcome = agent.report()
    assert outcome.refused == [team.digest] and outcome.layers == 2
    assert team.digest in read_state(other_store)["refused"]
    again = agent.report()
    assert again.refused == [team.digest] and again.mode == "delta"


def test_a_resumed_pull_moves_what_placement_predicted_from_the_staged_files(
    hub_with_chain: InProcessHub, other_store: SnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = hub_with_chain
    monkeypatch.setenv("FORKD_PULL_RANGE_BYTES", str(CHUNK))
    monkeypatch.setenv("FORKD_PULL_PIECE_BYTES", str(CHUNK))
    monkeypatch.setenv("FORKD_PULL_PARALLEL", "1")
    client = hub.client(hub.token("reader", "pull:acme/*"))
    with pytest.raises(ConnectionError):
        pull(other_store, client, Reference.parse("acme/py:head"), progress=Interrupt(after=20))
    outcome = reporter(hub, other_store).report()
    assert outcome.partial == 1
    answer = placed(hub)
    predicted = answer["host"]
    chain_total = answer["totalBytes"]
    assert 0 < predicted["missingBytes"] < chain_total
    resumed = pull(other_store, client, Reference.parse("acme/py:head"))
    vmstates = _vmstates(client)
    expected_frames = sum(
        link["missingBytes"] - (0 if link["held"] else vmstates[link["digest"]]) for link in predicted["links"]
    )
    assert sum(link.bytes_fetched for link in resumed.links) == expected_frames
    assert sum(link.chunks_resumed for link in resumed.links) > 0


def test_a_lazy_session_s_staged_image_counts_for_a_pull_of_its_head(
    hub_with_chain: InProcessHub, other_store: SnapshotStore, tmp_path: Path
) -> None:
    hub = hub_with_chain
    client = hub.client(hub.token("reader", "pull:acme/*"))
    with SnapshotStore(tmp_path / "full") as full:
        pulled_full = pull(full, client, Reference.parse("acme/py:head"))
        head = pulled_full.digest
        image = (full.path(pulled_full.tag) / mt.MEMORY_FILE).read_bytes()
    staged = state_dir(other_store, head)
    staged.mkdir(parents=True)
    digests = [
        None if not any(image[i : i + CHUNK]) else "blake3:" + blake3.blake3(image[i : i + CHUNK]).hexdigest()
        for i in range(0, len(image), CHUNK)
    ]
    present = list(range(0, 52, 3))  # a lazy fork read these chunks
    with open(staged / mt.MEMORY_FILE, "wb") as f:
        f.truncate(len(image))
        for i in present:
            f.seek(i * CHUNK)
            f.write(image[i * CHUNK : (i + 1) * CHUNK])
    write_chunk_list(staged / mt.MEMORY_FILE, CHUNK, digests)
    (staged / (mt.MEMORY_FILE + PRESENT_SUFFIX)).write_bytes(
        bytes(1 if i in present else 0 for i in range(len(digests)))
    )
    write_head_marker(staged, head)
    assert reporter(hub, other_store).report().partial == 1
    predicted = placed(hub)["host"]
    pulled = pull(other_store, client, Reference.parse("acme/py:head"))
    vmstates = _vmstates(client)
    expected = sum(link["missingBytes"] - vmstates[link["digest"]] for link in predicted["links"])
    assert sum(link.bytes_fetched for link in pulled.links) == expected
    assert sum(link.chunks_local for link in pulled.links) == len(present)


def _vmstates(client) -> dict[str, int]:
    repo = client.repository("acme/py")
    return {
        link.digest: json.loads(link.manifest)["layers"][0]["size"]
        for link in repo.get_chain("head")
        if json.loads(link.manifest)["layers"][0]["mediaType"] == mt.VMSTATE
    }


def test_the_report_service_reports_after_a_change_and_stops_when_asked(
    hub_with_chain: InProcessHub, store: SnapshotStore, tmp_path: Path
) -> None:
    hub = hub_with_chain
    lines: list[str] = []
    service = ReportService(reporter(hub, store), store, lines.append, heartbeat=3600, poll=0.05)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop))
        await _until(lambda: read_state(store).get("generation") == 1)
        src = tmp_path / "local"
        src.mkdir()
        (src / "memory.bin").write_bytes(b"x" * 4096)
        (src / "vmstate").write_bytes(b"y")
        await asyncio.to_thread(_import, store.root, src)  # any change, by any process: the agent reports again
        await _until(lambda: read_state(store).get("changes") == store.changes() == 1)
        stop.set()
        await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert [line.split(" (")[1].split(",")[0] for line in lines] == ["full", "delta"]


def _import(root: Path, src: Path) -> None:
    with SnapshotStore(root) as elsewhere:  # its own store: the local databases belong to the thread
        elsewhere.import_snapshot(src, "local")


async def _until(condition, within: float = 60.0) -> None:
    for _ in range(int(within / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition never met")


def test_one_agent_per_store(store: SnapshotStore) -> None:
    first = NodeAgent(store, [], print)
    with first._locked():
        with pytest.raises(AgentBusy, match=f"another node agent \\(pid {os.getpid()}\\) already serves"):
            with NodeAgent(store, [], print)._locked():
                pass


def test_node_status_names_the_peer_url_the_last_report_carried(
    inproc_hub: InProcessHub, store: SnapshotStore, capsys: pytest.CaptureFixture[str]
) -> None:
    hub = inproc_hub
    Reporter(
        store, hub.client(hub.token("h", "node:acme/*")), "h", vmms=VMMS, peer_url="http://127.0.0.1:7480"
    ).report()
    assert main(["node", "status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peer_url"] == "http://127.0.0.1:7480"
    assert main(["node", "status"]) == 0
    assert "serving chunks to fleet peers at http://127.0.0.1:7480" in capsys.readouterr().out
