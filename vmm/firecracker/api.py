"""Firecracker's REST API over its Unix socket, with ``http.client`` (no extra dependency).

Every call opens a fresh connection (cheap on a Unix socket, and immune to a half-closed
keep-alive). Non-2xx answers carry ``{"fault_message": ...}``; they become ``VmmProtocolError``
with that message and the request line, so a failed restore says exactly which call failed.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vmm.errors import VmmProtocolError
from vmm.unixsock import connect_unix


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: Path, timeout: float, alive: Callable[[], bool]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = socket_path
        self._alive = alive

    def connect(self) -> None:
        self.sock = connect_unix(self._socket_path, self.timeout or 10.0, self._alive)
        self.sock.settimeout(self.timeout)


class FirecrackerApi:
    """Client for one Firecracker process's ``--api-sock``."""

    def __init__(self, socket_path: Path, timeout: float = 30.0, alive: Callable[[], bool] = lambda: True) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self._alive = alive

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Send one request; return the decoded JSON body (None for 204). Raises ``VmmProtocolError``."""
        conn = _UnixHTTPConnection(self.socket_path, self.timeout, self._alive)
        try:
            payload = json.dumps(body).encode() if body is not None else None
            headers = {"Accept": "application/json"}
            if payload is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (OSError, TimeoutError, http.client.HTTPException) as exc:
            raise VmmProtocolError(f"Firecracker API {method} {path}: {exc}") from exc
        finally:
            conn.close()
        data: Any = None
        if raw:
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise VmmProtocolError(f"Firecracker API {method} {path}: non-JSON reply {raw[:200]!r}") from exc
        if not 200 <= response.status < 300:
            fault = data.get("fault_message") if isinstance(data, dict) else raw[:300].decode(errors="replace")
            raise VmmProtocolError(f"Firecracker API {method} {path} → {response.status}: {fault}")
        return data

    def put(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PATCH", path, body)

    def get(self, path: str) -> Any:
        return self.request("GET", path)
