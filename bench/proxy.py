"""A byte-counting TCP relay: point any client at it to get the bytes really on the wire.

It is used in separate, untimed runs so its cost never enters a timing.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from common import MiB


class CountingProxy:
    """A TCP relay 127.0.0.1:port → target that counts payload bytes each way (headers included)."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.host = f"127.0.0.1:{self.port}"
        self.up = 0  # client → server
        self.down = 0  # server → client
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closing = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def reset(self) -> tuple[int, int]:
        """Wait for open connections to finish, return (up, down) since the last reset, zero them."""
        self.settle()
        with self._lock:
            counts, self.up, self.down = (self.up, self.down), 0, 0
        return counts

    def settle(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        for t in list(self._threads):
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

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
            for src, dst, up in ((client, server, True), (server, client, False)):
                t = threading.Thread(target=self._pump, args=(src, dst, up), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        buf = memoryview(bytearray(1 * MiB))
        try:
            while True:
                n = src.recv_into(buf)
                if n == 0:
                    break
                dst.sendall(buf[:n])
                with self._lock:
                    if up:
                        self.up += n
                    else:
                        self.down += n
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
            if not up:  # the server side finished last: close both
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.close()

    def close(self) -> None:
        self._closing = True
        self.sock.close()

    def __enter__(self) -> CountingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
