"""The node agent's peer chunk server (forkd_client/node/peers.py) against a store that pulled a real chain from an
in-process hub: the fleet token is required, requests are bounded, only verified chunks are served (a changed file's
chunks are reported missing, never sent), an unknown digest is missing, and the agent's options are checked."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest

from forkd_client.cli.main import main
from forkd_client.errors import UsageError
from forkd_client.hub.peerwire import MAX_SKEW_S, MISSING, PATH, authorization, authorized, parse_records
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.node import peers as peers_module
from forkd_client.node.peers import PeerConfigError, bind_listener, check_peer_url, default_url, fleet_token
from forkd_client.store import SnapshotStore
from manifest import mediatypes as mt
from tests.forkd_client.hub.conftest import InProcessHub
from tests.forkd_client.node.test_report import dense_chain
from tests.forkd_client.peering import FLEET_TOKEN, peer_server

CHUNK = 64 << 10


@pytest.fixture
def pulled(inproc_hub: InProcessHub, tmp_path: Path, other_store: SnapshotStore) -> SnapshotStore:
    """``other_store`` holding acme/py:head (base ← head), pulled from the hub: its chunks indexed as installed."""
    with SnapshotStore(tmp_path / "pusher") as pusher:
        dense_chain(tmp_path / "src", pusher)
        push(pusher, inproc_hub.client(inproc_hub.token("ci", "push:acme/*")), "head", Reference.parse("acme/py:head"))
    result = pull(
        other_store, inproc_hub.client(inproc_hub.token("reader", "pull:acme/*")), Reference.parse("acme/py:head")
    )
    assert [link.tag for link in result.links] == ["base", "py-head"], result.links
    return other_store


def chunks_of(path: Path) -> list[tuple[str, bytes]]:
    data = path.read_bytes()
    out = []
    for i in range(0, len(data), CHUNK):
        piece = data[i : i + CHUNK]
        if piece.strip(b"\0"):
            out.append(("blake3:" + blake3.blake3(piece).hexdigest(), piece))
    return out


def post(
    url: str, body: bytes, token: str | None = FLEET_TOKEN, *, auth: str | None = None, audience: str | None = None
) -> tuple[int, bytes]:
    """POST digests to the peer at ``url``, proving ``token`` for ``audience`` (default: that URL), or sending ``auth``."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = auth
    elif token is not None:
        headers["Authorization"] = authorization(token, audience or url, time.time())
    try:
        conn.request("POST", PATH, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    except ConnectionError:  # a busy server answers 503 and closes, maybe before the body is sent
        return 0, b""
    finally:
        conn.close()


def test_a_proof_of_the_fleet_token_for_this_peer_is_required(pulled: SnapshotStore) -> None:
    digest = chunks_of(pulled.path("py-head") / mt.MEMORY_FILE)[0][0]
    body = json.dumps([digest]).encode()
    with peer_server(pulled.root) as server:
        assert post(server.url, body, token=None)[0] == 401
        assert post(server.url, body, token=FLEET_TOKEN + "x")[0] == 401
        assert post(server.url, body, token="")[0] == 401
        # the token itself is not a credential (it never travels), nor is a proof made for another peer's URL
        assert post(server.url, body, auth=f"Bearer {FLEET_TOKEN}")[0] == 401
        assert post(server.url, body, audience="http://10.9.9.9:7480")[0] == 401
        stale = authorization(FLEET_TOKEN, server.url, time.time() - MAX_SKEW_S - 5)
        assert post(server.url, body, auth=stale)[0] == 401
        status, text = post(server.url, body, token=None)
        assert status == 401 and b"ForkdPeer" in text and server.url.encode() in text
        assert post(server.url, body)[0] == 200
    assert server.served_chunks == 1


def test_a_proof_is_bound_to_the_fleet_token_the_peer_url_and_the_time() -> None:
    now = 1_800_000_000.0
    proof = authorization("s3cret", "http://10.0.0.1:7480", now)
    assert authorized(proof, b"s3cret", "http://10.0.0.1:7480/", now + MAX_SKEW_S)  # a trailing / is the same URL
    assert not authorized(proof, b"s3cret", "http://10.0.0.1:7480", now + MAX_SKEW_S + 1)
    assert not authorized(proof, b"s3cret", "http://10.0.0.2:7480", now)
    assert not authorized(proof, b"other", "http://10.0.0.1:7480", now)
    assert not authorized(proof.replace("t=", "t=1"), b"s3cret", "http://10.0.0.1:7480", now)
    assert "s3cret" not in proof


def test_requests_are_bounded(pulled: SnapshotStore) -> None:
    digest = chunks_of(pulled.path("py-head") / mt.MEMORY_FILE)[0][0]
    with peer_server(pulled.root) as server:
        status, body = post(server.url, json.dumps([digest] * 257).encode())
        assert status == 400 and b"257 digests, over the 256-digest limit" in body
        assert post(server.url, json.dumps(["sha256:" + "0" * 64]).encode())[0] == 400
        assert post(server.url, b"{not json")[0] == 400
        assert post(server.url, json.dumps({"digests": [digest]}).encode())[0] == 400
        assert post(server.url, b"[" + b'"x",' * 40000 + b'"x"]')[0] == 413
        assert server.served_chunks == 0


def test_serves_verified_chunks_in_order_and_reports_unknown_ones_missing(pulled: SnapshotStore) -> None:
    chunks = chunks_of(pulled.path("base") / mt.MEMORY_FILE)[:5]
    unknown = "blake3:" + "ab" * 32
    asked = [chunks[0][0], unknown, *(d for d, _ in chunks[1:])]
    with peer_server(pulled.root) as server:
        status, body = post(server.url, json.dumps(asked).encode())
    assert status == 200
    records = list(parse_records(body, [CHUNK] * len(asked)))
    assert records[1] is None
    assert [bytes(r) for r in records if r is not None] == [data for _, data in chunks]
    assert body[len(b"FKPEER1\n") + 4 + CHUNK : len(b"FKPEER1\n") + 8 + CHUNK] == MISSING.to_bytes(4, "big")


def test_a_chunk_of_a_file_changed_since_it_was_verified_is_not_served(pulled: SnapshotStore) -> None:
    memory = pulled.path("base") / mt.MEMORY_FILE
    (first, _), (second, data) = chunks_of(memory)[:2]
    with open(memory, "r+b") as f:  # behind the store's back: the verified record no longer trusts the file
        f.seek(CHUNK)
        f.write(bytes(reversed(data)))
    with peer_server(pulled.root) as server:
        status, body = post(server.url, json.dumps([first, second]).encode())
    assert status == 200
    assert list(parse_records(body, [CHUNK, CHUNK])) == [None, None]
    assert server.served_chunks == 0


def test_the_peer_server_refuses_to_start_without_a_fleet_token_or_a_bindable_address(tmp_path: Path) -> None:
    with pytest.raises(PeerConfigError, match="FORKD_FLEET_TOKEN"):
        fleet_token(None, env={})
    assert fleet_token(None, env={"FORKD_FLEET_TOKEN": " s3cret\n"}) == "s3cret"
    (tmp_path / "token").write_text("from-file\n")
    assert fleet_token(tmp_path / "token", env={"FORKD_FLEET_TOKEN": "env"}) == "from-file"
    (tmp_path / "empty").write_text("")
    with pytest.raises(PeerConfigError, match="is empty"):
        fleet_token(tmp_path / "empty", env={})
    for bad in ("7480", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:99999"):
        with pytest.raises(PeerConfigError, match="--peer-listen"):
            bind_listener(bad)
    assert issubclass(PeerConfigError, UsageError.__mro__[1])  # a ClientError: a clean message, no traceback


def test_the_peer_url_is_one_the_hub_takes(tmp_path: Path) -> None:
    assert check_peer_url("http://10.0.0.2:7480") == "http://10.0.0.2:7480"
    assert check_peer_url("https://h1.fleet.internal/forkd") == "https://h1.fleet.internal/forkd"
    assert check_peer_url("http://[::1]:7480") == "http://[::1]:7480"
    for bad in ("ftp://h1", "http://u:p@h1", "http://h1/?x=1", "h1:7480", "http://" + "a" * 300):
        with pytest.raises(PeerConfigError, match="--peer-url"):
            check_peer_url(bad)
    sock = bind_listener("0.0.0.0:0")  # every address: peers are told this machine's name, not 0.0.0.0
    try:
        assert default_url(sock) == f"http://{socket.gethostname()}:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_oversized_headers_and_other_routes_are_refused(pulled: SnapshotStore) -> None:
    with peer_server(pulled.root) as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST " + PATH.encode() + b" HTTP/1.1\r\nX-Big: " + b"a" * (20 << 10) + b"\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 431 ")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("GET", "/")
        assert conn.getresponse().status == 404
        conn.close()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["node", "serve", "--peer-url", "http://h1:7480"], "need --peer-listen"),
        (["node", "serve", "--peer-listen", "127.0.0.1:0"], "FORKD_FLEET_TOKEN"),
        (["node", "serve", "--peer-listen", "127.0.0.1:0", "--fleet-token-file", "/nonexistent"], "/nonexistent"),
        (["pull", "acme/py:head", "--lazy", "--peers"], "--peers works with a plain hub pull"),
        (["pull", "acme/py:head", "--peers"], "FORKD_FLEET_TOKEN"),
    ],
)
def test_the_cli_refuses_a_peer_set_up_it_cannot_run(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("FORKD_FLEET_TOKEN", raising=False)
    monkeypatch.delenv("FORKD_PEER_LISTEN", raising=False)
    monkeypatch.setenv("FORKD_HOME", str(tmp_path / "home"))
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_an_answer_carries_at_most_its_byte_bound_and_requests_past_the_slots_are_503(
    pulled: SnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(peers_module, "MAX_RESPONSE_BYTES", 2 * CHUNK)
    chunks = chunks_of(pulled.path("base") / mt.MEMORY_FILE)[:5]
    with peer_server(pulled.root, max_connections=1, queue_wait=0.3) as server:
        status, body = post(server.url, json.dumps([d for d, _ in chunks]).encode())
        assert status == 200
        records = list(parse_records(body, [CHUNK] * 5))
        assert [r is not None for r in records] == [True, True, False, False, False]  # the rest: ask again
        host, port = server.url.removeprefix("http://").split(":")
        ask = json.dumps([chunks[0][0]]).encode()
        with socket.create_connection((host, int(port)), timeout=10) as held:
            held.sendall(b"POST " + PATH.encode() + b" HTTP/1.1\r\n")  # holds the one slot, headers unfinished
            started = time.monotonic()
            assert until(lambda: post(server.url, ask)[0] == 503)
            assert time.monotonic() - started >= 0.3  # it waited for a slot first
        assert until(lambda: post(server.url, ask)[0] == 200)  # the slot is free once that peer left


def until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_store_that_cannot_be_read_is_a_503_and_the_service_stays_up(pulled: SnapshotStore) -> None:
    digest = chunks_of(pulled.path("base") / mt.MEMORY_FILE)[0][0]
    (pulled.root / "chunk-index.db").write_bytes(b"not a database" * 512)  # opened by the first request
    for leftover in ("chunk-index.db-wal", "chunk-index.db-shm"):
        (pulled.root / leftover).unlink(missing_ok=True)
    with peer_server(pulled.root) as server:
        for _ in range(2):
            status, text = post(server.url, json.dumps([digest]).encode())
            assert status == 503 and b"cannot read chunks here now" in text, text
    assert any("cannot read this store's chunks" in line for line in server.lines)  # type: ignore[attr-defined]
