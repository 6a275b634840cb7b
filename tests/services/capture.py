"""A recording TCP relay: clients talk to ``url``, it forwards to a target port and keeps every
byte the clients sent (``sent()``) and, per connection, both sides (``exchanges()``), so a test can
read the real requests and responses on the wire (:func:`http_exchanges` parses HTTP/1.1)."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from dataclasses import dataclass

__all__ = ["CaptureRelay", "HttpExchange", "http_exchanges"]

_HEAD = re.compile(rb"(.*?)\r\n\r\n", re.S)


@dataclass(frozen=True)
class HttpExchange:
    """One request and its answer as they crossed the wire (header names lowercased)."""

    method: str
    target: str
    headers: dict[str, str]
    status: int
    response_headers: dict[str, str]
    body_bytes: int


def _head(data: bytes, at: int) -> tuple[str, dict[str, str], int]:
    m = _HEAD.match(data, at)
    if m is None:
        raise ValueError(f"no complete HTTP head at byte {at}")
    first, *lines = m.group(1).decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines)}
    return first, headers, m.end()


def _body_end(data: bytes, at: int, headers: dict[str, str]) -> int:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            eol = data.index(b"\r\n", at)
            size = int(data[at:eol].split(b";")[0], 16)
            at = eol + 2 + size + 2
            if size == 0:
                return at
    return at + int(headers.get("content-length", "0"))


def http_exchanges(sent: bytes, received: bytes) -> list[HttpExchange]:
    """Pair the HTTP/1.1 requests of one connection with its answers (bodies skipped by length)."""
    out, up, down = [], 0, 0
    while up < len(sent) and down < len(received):
        line, headers, up = _head(sent, up)
        up = _body_end(sent, up, headers)
        method, target = line.split(" ")[:2]
        status_line, answer, down = _head(received, down)
        start = down
        down = (
            down
            if method == "HEAD" or status_line.split(" ")[1] in ("204", "304")
            else _body_end(received, down, answer)
        )
        out.append(HttpExchange(method, target, headers, int(status_line.split(" ")[1]), answer, down - start))
    return out


class CaptureRelay:
    """127.0.0.1:port → 127.0.0.1:target; ``sent()`` is everything clients wrote, ``exchanges()`` both
    sides of each connection, ``close()`` stops it."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._upstream: list[bytes] = []
        self._connections: list[tuple[bytearray, bytearray]] = []
        self._lock = threading.Lock()
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def sent(self) -> bytes:
        with self._lock:
            return b"".join(self._upstream)

    def exchanges(self) -> list[tuple[bytes, bytes]]:
        """``(what the client sent, what the target answered)`` of each connection, in order of accept."""
        with self._lock:
            return [(bytes(up), bytes(down)) for up, down in self._connections]

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            up, down = bytearray(), bytearray()
            with self._lock:
                self._connections.append((up, down))
            threading.Thread(target=self._pump, args=(client, server, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, down, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bytearray, upstream: bool) -> None:
        try:
            while data := src.recv(1 << 20):
                with self._lock:
                    record += data
                    if upstream:
                        self._upstream.append(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closing = True
        self.sock.close()
