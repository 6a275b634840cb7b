"""A recording TCP relay: clients talk to ``url``, it forwards to a target port and keeps every
byte the clients sent (``sent()``), so a test can read the real requests on the wire."""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["CaptureRelay"]


class CaptureRelay:
    """127.0.0.1:port → 127.0.0.1:target; ``sent()`` is everything clients wrote, ``close()`` stops it."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._upstream: list[bytes] = []
        self._lock = threading.Lock()
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def sent(self) -> bytes:
        with self._lock:
            return b"".join(self._upstream)

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
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(1 << 20):
                if record:
                    with self._lock:
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
