"""A pull with fleet peers (forkd_client/hub/peers.py, fill.py) on one in-process hub: store A pulled the chain, serves
it with the node agent's peer server on 127.0.0.1 and reported; store B pulls with peers and gets most bytes from A,
byte-identical. Lying peers (wrong bytes, truncated, slow, 500, garbage framing) never install wrong memory: B's pull
completes from the hub, and the liar is dropped after its first request, not retried per chunk."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from forkd_client.errors import UsageError
from forkd_client.hub import fill as fill_module
from forkd_client.hub.peers import PeerOptions, peer_options
from forkd_client.hub.peerwire import MAGIC, encode_record
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.node.report import Reporter
from forkd_client.store import SnapshotStore
from manifest import mediatypes as mt
from tests.forkd_client.hub.conftest import InProcessHub
from tests.forkd_client.node.test_report import VMMS, dense_chain
from tests.forkd_client.peering import FLEET_TOKEN, peer_server
from tests.services.httpserver import QuietHTTPServer

REF = Reference.parse("acme/py:head")
CHUNK = 64 << 10


@pytest.fixture
def fleet(inproc_hub: InProcessHub, tmp_path: Path) -> Iterator[tuple[InProcessHub, SnapshotStore]]:
    """The hub holding acme/py:head, and store A that pulled it (its chunks indexed, as a pull leaves them)."""
    with SnapshotStore(tmp_path / "pusher") as pusher:
        dense_chain(tmp_path / "src", pusher)
        push(pusher, inproc_hub.client(inproc_hub.token("ci", "push:acme/*")), "head", REF)
    with SnapshotStore(tmp_path / "a") as a:
        pull(a, inproc_hub.client(inproc_hub.token("reader-a", "pull:acme/*")), REF)
        yield inproc_hub, a


def report_as(hub: InProcessHub, store: SnapshotStore, host: str, peer_url: str) -> None:
    Reporter(store, hub.client(hub.token(host, "node:acme/*")), host, vmms=VMMS, peer_url=peer_url).report()


def memory_files(store: SnapshotStore) -> list[bytes]:
    return [(store.path(tag) / mt.MEMORY_FILE).read_bytes() for tag in ("base", "py-head")]


def options(timeout: float = 5.0) -> PeerOptions:
    return PeerOptions(FLEET_TOKEN, timeout, host="b")


def test_a_pull_with_peers_takes_its_chunks_from_a_peer_and_installs_the_same_bytes(fleet, tmp_path: Path) -> None:
    hub, a = fleet
    with peer_server(a.root) as server, SnapshotStore(tmp_path / "b") as b:
        report_as(hub, a, "a", server.url)
        result = pull(b, hub.client(hub.token("reader-b", "pull:acme/*")), REF, peers=options())
        assert memory_files(b) == memory_files(a)
    by = result.bytes_by_source
    assert by["peers"] == (48 + 16) * CHUNK and by["hub"] == 0, by  # every non-zero chunk of both links
    assert result.bytes_by_peer == {server.url: by["peers"]} and result.peers_dropped == {}
    assert [link.chunks_peers for link in result.links] == [48, 16]
    assert server.served_bytes == by["peers"]
    obj = result.to_obj()
    assert obj["bytes_by_source"] == by and obj["links"][1]["bytes_by_source"]["peers"] == 16 * CHUNK
    json.dumps(obj)


def test_without_peers_on_nothing_is_asked_of_peers(fleet, tmp_path: Path) -> None:
    hub, a = fleet
    with peer_server(a.root) as server, SnapshotStore(tmp_path / "b") as b:
        report_as(hub, a, "a", server.url)
        result = pull(b, hub.client(hub.token("reader-b", "pull:acme/*")), REF)
    assert result.bytes_by_source == {"hub": (48 + 16) * CHUNK, "peers": 0, "local": 0, "resumed": 0}
    assert server.served_chunks == 0


def _wrong_bytes(handler: Liar, digests: list[str]) -> None:
    handler.answer(200, MAGIC + b"".join(encode_record(os.urandom(CHUNK)) for _ in digests))


def _truncated(handler: Liar, digests: list[str]) -> None:
    whole = MAGIC + b"".join(encode_record(os.urandom(CHUNK)) for _ in digests)
    handler.answer(200, whole[: len(whole) // 2])


def _slow(handler: Liar, digests: list[str]) -> None:
    time.sleep(1.5)  # past the pull's 0.5 s peer timeout
    handler.answer(200, MAGIC + b"".join(encode_record(None) for _ in digests))


def _error(handler: Liar, digests: list[str]) -> None:
    handler.answer(500, b"internal error")


def _garbage(handler: Liar, digests: list[str]) -> None:
    handler.answer(200, os.urandom(4096))


def _longer_records(handler: Liar, digests: list[str]) -> None:
    handler.answer(200, MAGIC + b"".join(encode_record(os.urandom(CHUNK + 1)) for _ in digests))


class Liar(BaseHTTPRequestHandler):
    behave: Callable[[Liar, list[str]], None]
    requests: list[int]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        digests = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(len(digests))
        type(self).behave(self, digests)

    def answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    "behave", [_wrong_bytes, _truncated, _slow, _error, _garbage, _longer_records], ids=lambda f: f.__name__.strip("_")
)
def test_a_lying_peer_never_installs_wrong_memory_and_the_pull_completes_from_the_hub(
    fleet, tmp_path: Path, behave: Callable[[Liar, list[str]], None]
) -> None:
    hub, a = fleet
    handler = type("BoundLiar", (Liar,), {"behave": staticmethod(behave), "requests": []})
    server = QuietHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        report_as(hub, a, "liar", url)  # the liar claims to hold every layer whole
        with SnapshotStore(tmp_path / "b") as b:
            result = pull(b, hub.client(hub.token("reader-b", "pull:acme/*")), REF, peers=options(timeout=0.5))
            assert memory_files(b) == memory_files(a)
    finally:
        server.shutdown()
        server.server_close()
    assert result.bytes_by_source == {"hub": (48 + 16) * CHUNK, "peers": 0, "local": 0, "resumed": 0}
    assert list(result.peers_dropped) == [url]
    assert handler.requests == [48]  # one request (the base's one batch), then dropped: never asked again


def test_peers_are_opt_in_and_need_the_fleet_token() -> None:
    assert peer_options(False, env={}) is None
    assert peer_options(False, env={"FORKD_FLEET_TOKEN": "t"}) is None
    with pytest.raises(UsageError, match="FORKD_FLEET_TOKEN"):
        peer_options(True, env={})
    on = peer_options(False, env={"FORKD_PEERS": "1", "FORKD_FLEET_TOKEN": "t", "FORKD_PEERS_HOST": "me"})
    assert on == PeerOptions("t", 5.0, "me")
    assert peer_options(True, env={"FORKD_FLEET_TOKEN": "t", "FORKD_PEERS_TIMEOUT": "0.25"}).timeout == 0.25  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="FORKD_PEERS_TIMEOUT"):
        peer_options(True, env={"FORKD_FLEET_TOKEN": "t", "FORKD_PEERS_TIMEOUT": "soon"})


def test_a_good_peer_and_a_liar_the_good_one_serves_what_it_was_given_and_the_hub_the_rest(
    fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, a = fleet
    monkeypatch.setattr(fill_module, "BATCH_BYTES", 16 * CHUNK)  # the base in 3 batches, round robin: both peers asked
    handler = type("BoundLiar", (Liar,), {"behave": staticmethod(_wrong_bytes), "requests": []})
    liar = QuietHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=liar.serve_forever, daemon=True).start()
    liar_url = f"http://127.0.0.1:{liar.server_address[1]}"
    try:
        with peer_server(a.root) as server, SnapshotStore(tmp_path / "b") as b:
            report_as(hub, a, "a", server.url)
            report_as(hub, a, "liar", liar_url)
            result = pull(b, hub.client(hub.token("reader-b", "pull:acme/*")), REF, peers=options())
            assert memory_files(b) == memory_files(a)
    finally:
        liar.shutdown()
        liar.server_close()
    by = result.bytes_by_source
    # the base's batches given to the liar (one or two of three, round robin) came from the hub, the rest from the
    # good peer; once it failed the liar was asked nothing more (a second batch only if already in flight; the
    # head's batch went to the good peer)
    assert handler.requests in ([16], [16, 16]), handler.requests
    assert by["hub"] in (16 * CHUNK, 32 * CHUNK) and by["hub"] >= sum(handler.requests) * CHUNK, by
    assert by["peers"] == 64 * CHUNK - by["hub"], by
    assert result.bytes_by_peer == {server.url: by["peers"]}
    assert list(result.peers_dropped) == [liar_url]
