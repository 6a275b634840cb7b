"""A minimal QMP client over a raw Unix socket: greeting → qmp_capabilities → execute.

QMP is line-delimited JSON. Asynchronous ``{"event": ...}`` lines can arrive at any time and are
skipped; every read has a deadline, so a wedged QEMU raises instead of hanging the caller.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vmm.errors import VmmProtocolError
from vmm.unixsock import connect_unix


class QmpClient:
    """One QMP session. Raises ``VmmProtocolError`` for QMP errors, timeouts and lost sockets."""

    def __init__(self, sock: socket.socket, timeout: float = 10.0) -> None:
        self._sock = sock
        self._buf = b""
        self.timeout = timeout
        greeting = self._read_message(timeout)
        if "QMP" not in greeting:
            raise VmmProtocolError(f"unexpected QMP greeting: {greeting!r}")
        self.version: dict[str, int] = greeting["QMP"].get("version", {}).get("qemu", {})
        self.execute("qmp_capabilities")

    @classmethod
    def connect(cls, path: Path, timeout: float = 10.0, alive: Callable[[], bool] = lambda: True) -> QmpClient:
        """Connect (retrying until the socket appears) and negotiate capabilities."""
        try:
            return cls(connect_unix(path, timeout, alive), timeout)
        except (OSError, TimeoutError) as exc:
            raise VmmProtocolError(f"cannot open QMP socket {path}: {exc}") from exc

    def execute(self, command: str, arguments: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Run one command and return its ``return`` value. Raises ``VmmProtocolError``."""
        request: dict[str, Any] = {"execute": command}
        if arguments is not None:
            request["arguments"] = arguments
        try:
            self._sock.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            raise VmmProtocolError(f"QMP {command}: socket error {exc}") from exc
        while True:
            reply = self._read_message(timeout or self.timeout)
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                err = reply["error"]
                raise VmmProtocolError(f"QMP {command} failed: {err.get('class')}: {err.get('desc')}")
            # anything else is an event; skip it

    def _read_message(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise VmmProtocolError(f"QMP: no reply within {timeout:.1f}s")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise VmmProtocolError(f"QMP: socket error {exc}") from exc
            if not chunk:
                raise VmmProtocolError("QMP: QEMU closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError as exc:
            raise VmmProtocolError(f"QMP: unparsable line {line[:200]!r}") from exc

    def close(self) -> None:
        """Close the socket (QEMU keeps running)."""
        self._sock.close()
