"""The raw-socket QMP client against a scripted QMP server on a socketpair."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from vmm.errors import VmmProtocolError
from vmm.qmp import QmpClient

GREETING = {"QMP": {"version": {"qemu": {"major": 7, "minor": 2, "micro": 22}}, "capabilities": []}}


def serve(sock: socket.socket, replies: list[list[dict]], received: list[dict]) -> None:
    """Send the greeting, then for each request line send the scripted reply lines."""
    sock.sendall(json.dumps(GREETING).encode() + b"\r\n")
    reader = sock.makefile("rb")
    for lines in replies:
        line = reader.readline()
        if not line:
            return
        received.append(json.loads(line))
        for reply in lines:
            sock.sendall(json.dumps(reply).encode() + b"\r\n")
    reader.read()  # keep the connection open until the client closes it


def client_with(replies: list[list[dict]], timeout: float = 2.0) -> tuple[QmpClient, list[dict]]:
    ours, theirs = socket.socketpair()
    received: list[dict] = []
    threading.Thread(target=serve, args=(theirs, replies, received), daemon=True).start()
    return QmpClient(ours, timeout=timeout), received


def test_negotiates_capabilities_and_skips_events() -> None:
    event = {"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}
    client, received = client_with([[{"return": {}}], [event, event, {"return": {"status": "paused"}}]])
    assert client.version == {"major": 7, "minor": 2, "micro": 22}
    assert client.execute("query-status") == {"status": "paused"}
    assert received == [{"execute": "qmp_capabilities"}, {"execute": "query-status"}]


def test_sends_arguments_and_raises_qmp_errors_with_class_and_text() -> None:
    error = {"error": {"class": "GenericError", "desc": "Property not found"}}
    client, received = client_with([[{"return": {}}], [error]])
    with pytest.raises(VmmProtocolError, match="migrate failed: GenericError: Property not found"):
        client.execute("migrate", {"uri": "exec:cat > x"})
    assert received[1] == {"execute": "migrate", "arguments": {"uri": "exec:cat > x"}}


def test_times_out_instead_of_hanging() -> None:
    client, _ = client_with([[{"return": {}}], []], timeout=0.3)
    with pytest.raises(VmmProtocolError, match="no reply within"):
        client.execute("query-status")


def test_rejects_a_non_qmp_greeting() -> None:
    ours, theirs = socket.socketpair()
    theirs.sendall(b'{"hello": 1}\n')
    with pytest.raises(VmmProtocolError, match="greeting"):
        QmpClient(ours, timeout=1)


def test_connect_reports_a_missing_socket(tmp_path) -> None:
    with pytest.raises(VmmProtocolError, match="cannot open QMP socket"):
        QmpClient.connect(tmp_path / "none.sock", timeout=0.2)
