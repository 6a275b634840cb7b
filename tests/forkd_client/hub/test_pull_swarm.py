"""Hosts pulling one chain at once, with peers (forkd_client/hub/swarmfill.py; the hub's tracker, the agents serving
what their pulls staged): three stores against one in-process hub, each with its node agent's peer server on
127.0.0.1, install byte-identical files while the hub sends the chain's bytes about once (its response bytes counted
by its own metrics); a swarm member that lies or stalls costs time, never correctness."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from forkd_client.hub.peers import PeerOptions
from forkd_client.hub.pull import PullResult, pull
from forkd_client.hub.swarmfill import RUN_BYTES, owner_of
from forkd_client.snapdir import read_hub_meta
from forkd_client.store import SnapshotStore
from tests.forkd_client.hub.conftest import InProcessHub
from tests.forkd_client.hub.test_pull_peers import REF, Liar, _wrong_bytes, fleet, memory_files, report_as
from tests.forkd_client.peering import FLEET_TOKEN, peer_server
from tests.services.httpserver import QuietHTTPServer

__all__ = ["fleet"]

CHUNK = 64 << 10
CHAIN = (48 + 16) * CHUNK  # the chain's chunk bytes (random: its frames are as large)


def hub_bytes_out(hub: InProcessHub) -> float:
    return hub.http.app.state.metrics.bytes_out._value.get()  # type: ignore[no-any-return]


def serving(stack: ExitStack, hub: InProcessHub, root: Path, host: str) -> None:
    """The host's peer server for the store at ``root`` on 127.0.0.1, reported to the hub with its URL."""
    server = stack.enter_context(peer_server(root))
    with SnapshotStore(root) as store:
        report_as(hub, store, host, server.url)


def files_of(root: Path) -> list[bytes]:
    with SnapshotStore(root) as store:
        return memory_files(store)


def tracker(hub: InProcessHub) -> Any:
    return hub.http.app.state.registry.peers.tracker


def pull_together(hub: InProcessHub, stores: dict[str, Path], stall: float = 3.0) -> dict[str, PullResult]:
    """Each store pulls REF as its host, all started at once, on threads (each opens its store there: a store's
    databases stay on their thread)."""
    results: dict[str, PullResult] = {}
    errors: list[BaseException] = []
    tokens = {host: hub.token(f"reader-{host}", "pull:acme/*") for host in stores}

    def one(host: str) -> None:
        try:
            with SnapshotStore(stores[host]) as store:
                options = PeerOptions(FLEET_TOKEN, 5.0, host, stall)
                results[host] = pull(store, hub.client(tokens[host]), REF, peers=options)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=one, args=(host,)) for host in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


def test_three_hosts_pulling_at_once_move_the_chain_from_the_hub_about_once(fleet, tmp_path: Path) -> None:
    hub, a = fleet  # a pulled the chain (the bytes to compare with) but is no peer: it never reported
    tracker(hub).window = 2.0
    with ExitStack() as stack:
        stores = {h: tmp_path / h for h in ("b", "c", "d")}
        for host, root in stores.items():
            serving(stack, hub, root, host)
        before = hub_bytes_out(hub)
        results = pull_together(hub, stores)
        egress = hub_bytes_out(hub) - before
        for root in stores.values():
            assert files_of(root) == memory_files(a)
    by = {host: r.bytes_by_source for host, r in results.items()}
    assert all(r.swarm_size == 3 for r in results.values()), by
    assert sum(b["hub"] + b["peers"] for b in by.values()) == 3 * CHAIN, by
    assert all(b["peers"] > 0 for b in by.values()), by
    # the hub sent the chain about once, not three times (plus manifests, maps, vmstates and the peers answers)
    assert egress <= 1.5 * CHAIN + (256 << 10), (egress, by)
    assert sum(b["hub"] for b in by.values()) <= 1.5 * CHAIN, by


@pytest.fixture
def liar() -> Iterator[Callable[[Callable[[Liar, list[str]], None]], tuple[str, list[int]]]]:
    servers: list[QuietHTTPServer] = []

    def start(behave: Callable[[Liar, list[str]], None]) -> tuple[str, list[int]]:
        handler = type("BoundLiar", (Liar,), {"behave": staticmethod(behave), "requests": []})
        server = QuietHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", handler.requests  # type: ignore[attr-defined]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _all_missing(handler: Liar, digests: list[str]) -> None:
    from forkd_client.hub.peerwire import MAGIC, encode_record

    handler.answer(200, MAGIC + b"".join(encode_record(None) for _ in digests))


@pytest.mark.parametrize("behave", [_wrong_bytes, _all_missing], ids=["lies", "stalls"])
def test_a_member_that_lies_or_stalls_costs_time_never_correctness(fleet, tmp_path: Path, liar, behave) -> None:
    hub, a = fleet
    url, requests = liar(behave)
    with SnapshotStore(tmp_path / "empty") as empty:  # a fresh report with a peer URL, holding nothing
        report_as(hub, empty, "liar", url)
    layers = [read_hub_meta(a.path(tag)).origin["manifest_digest"] for tag in ("base", "py-head")]  # type: ignore[union-attr]
    tracker(hub).window = 2.0
    repository = hub.client(hub.token("liar-pulls", "pull:acme/*")).repository("acme/py")
    asked = threading.Thread(target=lambda: repository.ask_peers(layers, "liar", pulling=True))
    with ExitStack() as stack:
        stores = {h: tmp_path / h for h in ("b", "c")}
        for host, root in stores.items():
            serving(stack, hub, root, host)
        asked.start()
        results = pull_together(hub, stores, stall=1.0)
        asked.join(10)
        for root in stores.values():
            assert files_of(root) == memory_files(a)
    assert requests, "the liar was never asked"
    for result in results.values():
        assert result.swarm_size == 3
        by = result.bytes_by_source
        assert by["hub"] + by["peers"] == CHAIN and result.bytes_by_peer.get(url, 0) == 0, by
        if behave is _wrong_bytes:
            assert url in result.peers_dropped, result.peers_dropped


def test_owners_take_runs_of_the_blobs_in_turn() -> None:
    blob = "sha256:" + "0000000000000005" + "0" * 48
    offsets = (0, RUN_BYTES - 1, RUN_BYTES, 2 * RUN_BYTES, 3 * RUN_BYTES)
    assert [owner_of(blob, offset, 3) for offset in offsets] == [2, 2, 0, 1, 2]
