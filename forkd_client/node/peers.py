"""The node agent's peer chunk server: this store's verified chunks for fleet peers (docs/mirrors.md,
"A fleet with peers"; the framing in :mod:`forkd_client.hub.peerwire`).

:class:`PeerService` is an agent service (:mod:`.agent`) listening on a socket bound beforehand
(:func:`bind_listener`, so its URL is known before the first report names it as the ``peerUrl`` fact). It
answers one route, ``POST /peer/v1/chunks``, over HTTP/1.1 with one request per connection:

- **Auth**: a proof of the fleet token bound to this peer's URL and the time
  (:func:`~forkd_client.hub.peerwire.authorized`: ``Authorization: ForkdPeer t=…,mac=…``, the MAC compared in
  constant time), checked before the body is read; anything else is 401. The token itself is never sent, so
  a URL a host reports learns nothing that opens another peer. The token comes from ``FORKD_FLEET_TOKEN`` or ``--fleet-token-file``
  (:func:`fleet_token`): without one the service refuses to start (:class:`PeerConfigError`).
- **Bounds**: a body of at most ``MAX_REQUEST_BYTES`` naming at most ``MAX_DIGESTS`` well-formed chunk
  digests (else 413 / 400, naming what was wrong), at most ``max_connections`` requests at a time (a burst
  beyond waits up to ``queue_wait`` seconds for a slot, at most ``MAX_WAITING`` connections at once; past
  either bound it is answered 503), headers of at most ``MAX_HEADER_BYTES`` within ``HEADER_TIMEOUT_S`` (else 431 or
  the connection closed), the body within ``BODY_TIMEOUT_S``, at most ``MAX_RESPONSE_BYTES`` of chunks per
  response (later chunks are sent as missing), taken by the peer within ``SEND_TIMEOUT_S``.
- **What is served**: each chunk found through the store's :class:`~forkd_client.hub.localchunks.LocalChunkIndex`
  (files the verified-content record still trusts, each chunk re-hashed on read), else in the staged files of a
  pull running on this host (:class:`~.staged.StagedChunks`: served only when the bytes there hash to the digest
  asked for, so a fleet pulling one chain at once trades chunks while it pulls): a changed file, a stale row or a
  chunk not written yet is a missing chunk, never wrong bytes. The store's databases and the reads and hashing live on
  the service's own reader threads (``READERS``, each with its own connections), never on the agent's loop.

A peer is untrusted by its readers all the same: they verify every chunk by its digest.

Shutdown: when the agent's ``stop`` is set the listener closes, requests in flight finish, the reader
thread closes the store's databases, and :meth:`PeerService.run` returns.

Errors: :class:`PeerConfigError` (no fleet token, a bad ``--peer-listen``, the address cannot be bound, a peer
URL the hub would refuse).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import ClientError
from ..hub.localchunks import LocalChunkIndex
from ..hub.peerwire import (
    CONTENT_TYPE,
    DIGEST,
    MAGIC,
    MAX_DIGESTS,
    MAX_PEER_URL,
    MAX_REQUEST_BYTES,
    MAX_RESPONSE_BYTES,
    MAX_SKEW_S,
    PATH,
    PEER_URL,
    authorized,
    encode_record,
)
from ..verified import VerifiedRecord
from .staged import StagedChunks

__all__ = ["PeerConfigError", "PeerService", "bind_listener", "check_peer_url", "fleet_token"]

FLEET_TOKEN_ENV = "FORKD_FLEET_TOKEN"
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 10.0
#: An answer not taken by the peer within this long is dropped (a reader that stalls frees its slot).
SEND_TIMEOUT_S = 60.0
MAX_HEADER_BYTES = 16 << 10
#: Requests served at once (each answer is built whole: at most this many times MAX_RESPONSE_BYTES in memory).
MAX_CONNECTIONS = 16
#: Connections waiting for a slot at most, and how long each waits (a burst of pullers is queued, not refused).
MAX_WAITING = 64
QUEUE_WAIT_S = 2.0
#: Reader threads (each reads and re-hashes the chunks of one request at a time).
READERS = 2
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


class PeerConfigError(ClientError):
    """The peer server cannot start as configured (the message says what to set)."""


def fleet_token(token_file: Path | None, env: dict[str, str] | None = None) -> str:
    """The fleet token: from ``token_file`` when given, else ``FORKD_FLEET_TOKEN``. Raises PeerConfigError."""
    env = dict(os.environ) if env is None else env
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as e:
            raise PeerConfigError(f"--fleet-token-file {token_file}: {e.strerror or e}") from None
        if not token:
            raise PeerConfigError(f"--fleet-token-file {token_file} is empty")
        return token
    token = (env.get(FLEET_TOKEN_ENV) or "").strip()
    if not token:
        raise PeerConfigError(
            f"the peer server needs the fleet token: set {FLEET_TOKEN_ENV} or pass --fleet-token-file "
            "(the same secret on every host of the fleet)"
        )
    return token


def bind_listener(listen: str) -> socket.socket:
    """A listening TCP socket on ``listen`` (``HOST:PORT``, ``[IPv6]:PORT``; port 0: any free one).
    Raises PeerConfigError."""
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise PeerConfigError(f"--peer-listen {listen!r}: use HOST:PORT (e.g. 0.0.0.0:7480, [::1]:7480)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise PeerConfigError(f"--peer-listen {listen}: cannot listen there: {e.strerror or e}") from None
    sock.setblocking(False)
    return sock


def default_url(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of the bound socket (what peers are told unless ``--peer-url`` says otherwise); a
    socket bound to every address (``0.0.0.0``, ``::``) is named by this machine's host name."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def check_peer_url(url: str) -> str:
    """``url`` if the hub will take it as the ``peerUrl`` fact (:data:`~forkd_client.hub.peerwire.PEER_URL`).
    Raises PeerConfigError."""
    if len(url) > MAX_PEER_URL or not PEER_URL.fullmatch(url):
        raise PeerConfigError(
            f"peer URL {url[:80]!r}: use http://HOST[:PORT][/PATH] or https://… (at most {MAX_PEER_URL} characters, "
            "no credentials or query); set it with --peer-url"
        )
    return url


#: Chunks of running pulls not written yet, in a row, after which a request's other staged lookups are answered
#: missing unread: a swarm member asks for chunks in the order their owner fetches them, so past a few misses
#: the rest are not there yet either, and each staged lookup reads and hashes a whole chunk (15 members asking
#: every 50-200 ms for 256 chunks they lack cost owners more CPU than serving the chain: bench/fleet_pull.py).
STAGED_MISSES = 4


class _Reader:
    """The store's chunk index on the one thread that uses it (SQLite connections stay on their thread)."""

    def __init__(self, store_root: Path) -> None:
        self.store_root = store_root
        self.index: LocalChunkIndex | None = None
        self.verified: VerifiedRecord | None = None
        self.staged = StagedChunks(self.store_root / ".staging")

    def read(self, digests: list[str]) -> list[bytes | None]:
        if self.index is None:
            self.verified = VerifiedRecord(self.store_root / "verified.db")
            self.index = LocalChunkIndex(self.store_root / "chunk-index.db", self.verified)
        out: list[bytes | None] = []
        budget = MAX_RESPONSE_BYTES
        looked = False  # the staged directories are looked at again once per request, on its first miss
        staged_misses = 0
        for digest in digests:
            data = self.index.read(digest) if budget > 0 else None
            if data is None and budget > 0 and staged_misses < STAGED_MISSES:
                if not looked:
                    self.staged.refresh()
                    looked = True
                data = self.staged.read(digest)
                staged_misses = 0 if data is not None else staged_misses + 1
            if data is not None and len(data) > budget:
                data = None
            if data is not None:
                budget -= len(data)
            out.append(data)
        return out

    def close(self) -> None:
        if self.index is not None:
            self.index.close()
        if self.verified is not None:
            self.verified.close()
        self.index = self.verified = None


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class PeerService:
    """Serves the store's verified chunks to fleet peers (module docstring). ``sock`` from :func:`bind_listener`."""

    name = "peers"

    def __init__(
        self,
        store_root: Path,
        sock: socket.socket,
        token: str,
        log: Any,
        *,
        url: str | None = None,
        max_connections: int = MAX_CONNECTIONS,
        readers: int = READERS,
        queue_wait: float = QUEUE_WAIT_S,
    ) -> None:
        if not token:
            raise PeerConfigError("the peer server needs a fleet token")
        self.store_root, self.sock, self.log = Path(store_root), sock, log
        self._token = token.encode()
        self.url = check_peer_url(url or default_url(sock))
        self.max_connections, self.queue_wait = max_connections, queue_wait
        self._busy = self._waiting = 0
        # one reader per thread (the store's SQLite connections stay on the thread that opened them)
        self._readers = [
            (_Reader(self.store_root), ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"forkd-peer-read{i}"))
            for i in range(max(1, readers))
        ]
        self._next = 0
        self._active: set[asyncio.Task[Any]] = set()  # requests being served (waited for on shutdown)
        self.served_chunks = 0
        self.served_bytes = 0

    async def run(self, stop: asyncio.Event) -> None:
        server = await asyncio.start_server(self._handle, sock=self.sock, limit=MAX_HEADER_BYTES)
        self.log(f"serving verified chunks to fleet peers at {self.url}")
        try:
            async with server:
                await stop.wait()
                server.close()
                await server.wait_closed()
        finally:
            if self._active:  # requests in flight finish (each is bounded by its timeouts) before the readers close
                await asyncio.wait(set(self._active), timeout=HEADER_TIMEOUT_S + BODY_TIMEOUT_S + SEND_TIMEOUT_S)
            loop = asyncio.get_running_loop()
            for reader, pool in self._readers:
                await loop.run_in_executor(pool, reader.close)
                pool.shutdown(wait=True)
            self.log(f"peer server stopped ({self.served_chunks} chunk(s), {self.served_bytes} bytes served)")

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._active.add(task)
        try:
            if not await self._queued():
                await self._respond(writer, 503, b"busy: too many peer requests at once; fetch elsewhere\n")
                return
            try:
                await self._serve(reader, writer)
            finally:
                self._busy -= 1
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the peer went away, stalled, or stopped reading: nothing more to say
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
            self._active.discard(task)

    async def _queued(self) -> bool:
        """A slot taken (True), else no slot within ``queue_wait`` or too many waiting already (False). Polled
        (every 20 ms): a counter on one loop cannot leak a slot the way a cancelled semaphore wait can."""
        if self._busy < self.max_connections:
            self._busy += 1
            return True
        if self._waiting >= MAX_WAITING:
            return False
        deadline = asyncio.get_running_loop().time() + self.queue_wait
        self._waiting += 1
        try:
            while self._busy >= self.max_connections:
                if asyncio.get_running_loop().time() >= deadline:
                    return False
                await asyncio.sleep(0.02)
            self._busy += 1
            return True
        finally:
            self._waiting -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEADER_TIMEOUT_S)
            except (asyncio.LimitOverrunError, ValueError):
                raise _Refused(431, f"the request's headers are over {MAX_HEADER_BYTES} bytes") from None
            method, path, headers = _parse_head(head)
            digests = await self._digests(reader, method, path, headers)
        except _Refused as e:
            await self._respond(writer, e.status, (e.message + "\n").encode())
            return
        chunk_reader, pool = self._readers[self._next % len(self._readers)]
        self._next += 1
        try:
            chunks = await asyncio.get_running_loop().run_in_executor(pool, chunk_reader.read, digests)
        except (OSError, sqlite3.Error) as e:  # the store's index or files: this request fails, the service stays
            self.log(f"peer request failed: cannot read this store's chunks: {e}")
            await self._respond(writer, 503, f"cannot read chunks here now: {e}\n".encode())
            return
        parts = [MAGIC]
        for chunk in chunks:  # each record written as it is, not copied into one body
            parts.append(encode_record(None) if chunk is None else len(chunk).to_bytes(4, "big"))
            if chunk is not None:
                parts.append(chunk)
                self.served_chunks += 1
                self.served_bytes += len(chunk)
        await self._respond(writer, 200, parts, CONTENT_TYPE)

    async def _digests(
        self, reader: asyncio.StreamReader, method: str, path: str, headers: dict[str, str]
    ) -> list[str]:
        if path.split("?")[0] != PATH:
            raise _Refused(404, f"no such route; the peer server answers POST {PATH}")
        if method != "POST":
            raise _Refused(405, f"use POST {PATH}")
        if not authorized(headers.get("authorization", ""), self._token, self.url, time.time()):
            raise _Refused(
                401,
                "a proof of the fleet token for this peer is required (Authorization: ForkdPeer, "
                "forkd_client/hub/peerwire.py; the same FORKD_FLEET_TOKEN, clocks within "
                f"{MAX_SKEW_S} s, and this peer's URL {self.url})",
            )
        length = headers.get("content-length")
        if length is None or not length.isdigit():
            raise _Refused(411, "a Content-Length is required")
        if int(length) > MAX_REQUEST_BYTES:
            raise _Refused(413, f"the request body is {int(length)} bytes, over the {MAX_REQUEST_BYTES}-byte limit")
        raw = await asyncio.wait_for(reader.readexactly(int(length)), BODY_TIMEOUT_S)
        try:
            digests = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise _Refused(400, f"the body is not JSON: {e}") from None
        if not isinstance(digests, list):
            raise _Refused(400, "the body must be a JSON array of chunk digests")
        if len(digests) > MAX_DIGESTS:
            raise _Refused(400, f"{len(digests)} digests, over the {MAX_DIGESTS}-digest limit of one request")
        for i, digest in enumerate(digests):
            if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
                raise _Refused(400, f"digest [{i}] is not a chunk digest (blake3:<64 hex>)")
        return digests

    @staticmethod
    async def _respond(
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes | list[bytes],
        content_type: str = "text/plain; charset=utf-8",
    ) -> None:
        parts = [body] if isinstance(body, bytes) else body
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {sum(len(p) for p in parts)}\r\nConnection: close\r\n\r\n"
        )
        writer.writelines([head.encode(), *parts])
        await asyncio.wait_for(writer.drain(), SEND_TIMEOUT_S)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """The request line and headers (names lower-cased). Raises _Refused(400)."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = lines[0].split(" ")
    except ValueError:
        raise _Refused(400, "not an HTTP/1.1 request line") from None
    if not version.startswith("HTTP/1."):
        raise _Refused(400, "HTTP/1.x only")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise _Refused(400, f"a malformed header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return method, path, headers
