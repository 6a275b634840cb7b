"""A real HTTP receiver for webhook tests: a threaded server on a loopback address.

It answers each POST with the next status of ``statuses`` (then ``default``), records every
request (headers, exact body) and checks the signature with the shared secret the way
docs/webhooks.md tells receivers to.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    def signed_with(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, self.headers.get("x-forkd-signature-256", ""))


class Receiver:
    def __init__(
        self,
        host: str = "127.0.0.1",
        statuses: list[int] | None = None,
        default: int = 200,
        tls: tuple[str, str] | None = None,
    ) -> None:
        """``tls``: (certificate file, key file) to serve HTTPS."""
        self.statuses = list(statuses or [])
        self.default = default
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else receiver.default
                    receiver.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, status)
                    )
                self.send_response(status)
                if status in (301, 302, 307, 308):
                    self.send_header("Location", "http://127.0.0.1:1/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://{host}:{self.server.server_address[1]}/hook"
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def wait_for(self, count: int, timeout: float = 20) -> list[Received]:
        """Block until ``count`` requests arrived (AssertionError after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        raise AssertionError(f"expected {count} webhook request(s), got {len(self.received)}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
