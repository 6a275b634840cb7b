"""Ranged GETs of presigned object-store URLs, each body read straight into one buffer of its size.

A redirected pull takes every data byte from the object store as ranged GETs of a few MiB
(``presigned.read_plan``, ``HubClient._ranges_from_store``). Through httpx each body arrives as
64 KiB h11 events, is copied into h11's receive buffer and out of it, and is joined at the end;
profiles of the pull put ~1.3 thread-s of a 1.5 s pull there. :class:`StoreReader` sends the GET
with :mod:`http.client` on a kept-alive connection and ``readinto``\\ s the body (its
Content-Length known) into one preallocated ``bytearray``: one copy from the socket, no per-event
work (about a third of httpx's client CPU for 4 MiB ranges from SeaweedFS, docs/benchmarks.md).

The requests carry only Host, Range and ``Accept-Encoding: identity``: a presigned URL is its own
credential, the hub token never goes there. HubClient uses this reader only when it built its own
HTTP client and no proxy is configured (httpx honours proxies, this reader does not); https URLs
get httpx's default certificate-verifying context, built on first use.

:func:`slice_ranges` cuts the asked ranges out of any single-range answer (a 200 or a 206), the
store's here and the hub's in ``HubClient``: one reader of ``Content-Range``.

Errors: :class:`StoreRefusal` (an answer other than 200/206, with its status, headers and body for
the caller to turn into a typed error), HubError (an answer larger than asked for, or not covering
the range), OSError / ``http.client.HTTPException`` (transport: refused, reset, timed out, cut short).
"""

from __future__ import annotations

import http.client
import re
import ssl
import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

from .errors import HubError

__all__ = ["SLACK_BYTES", "StoreReader", "StoreRefusal", "slice_ranges"]

SLACK_BYTES = 4096  # a 200 answer (the store ignored Range) may hold this much beyond the range
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
#: a kept-alive connection the store closed meanwhile fails like this on its next request
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.BadStatusLine)


class StoreRefusal(Exception):
    """The store answered with a status other than 200/206 (an expired URL: 403)."""

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.headers, self.body = status, headers, body


class StoreReader:
    """Ranged GETs over per-origin pools of kept-alive ``http.client`` connections (thread-safe)."""

    def __init__(self, timeout: float, keep: int = 16) -> None:
        self.timeout, self.keep = timeout, keep
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None
        self.connections_made = 0

    def get_range(self, url: str, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` of ``url``. Raises StoreRefusal, HubError, OSError, HTTPException."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HubError(f"not an http(s) URL: {url[:120]}")
        origin = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        bound = end - start + SLACK_BYTES
        for attempt in (1, 2):
            conn, reused = self._connection(origin)
            try:
                conn.request("GET", target, headers={"Range": f"bytes={start}-{end - 1}"})
                response = conn.getresponse()
            except _STALE:
                conn.close()
                if reused and attempt == 1:  # the store closed an idle connection: GET is safe to resend
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            try:
                body = _read_body(response, bound, url)
            except BaseException:
                conn.close()
                raise
            if response.will_close:
                conn.close()
            else:
                self._release(origin, conn)
            if response.status not in (200, 206):
                raise StoreRefusal(response.status, response.getheaders(), bytes(body))
            what = f"GET {_short(url)}"
            return slice_ranges(
                response.status, response.getheader("content-range"), body, [(start, end - start)], what
            )[0]
        raise AssertionError("unreachable")  # the loop returns or raises

    def close(self) -> None:
        """Close every idle connection (requests in progress close theirs when done)."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def _connection(self, origin: tuple[str, str, int]) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            pool = self._idle.get(origin)
            if pool:
                return pool.pop(), True
            self.connections_made += 1
            if origin[0] == "https" and self._tls is None:
                import httpx  # the same verifying context (certifi, SSL_CERT_FILE) as the hub's requests

                self._tls = httpx.create_ssl_context()
        scheme, host, port = origin
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._tls), False
        return http.client.HTTPConnection(host, port, timeout=self.timeout), False

    def _release(self, origin: tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        with self._lock:
            pool = self._idle.setdefault(origin, [])
            if len(pool) < self.keep:
                pool.append(conn)
                return
        conn.close()


def _read_body(response: http.client.HTTPResponse, bound: int, url: str) -> memoryview:
    """The whole body (at most ``bound`` bytes), into one buffer when its length is declared."""
    declared = response.getheader("content-length")
    if declared is None or not declared.isdigit():  # chunked or close-delimited: rare for a store
        data = response.read(bound + 1)
        if len(data) > bound:
            raise HubError(f"GET {_short(url)}: the store sent more than the {bound:,} bytes this request can need")
        return memoryview(data)
    size = int(declared)
    if size > bound:
        raise HubError(
            f"GET {_short(url)}: the store answered {size:,} bytes, more than the {bound:,} this request can need"
        )
    buffer = memoryview(bytearray(size))
    got = 0
    while got < size:
        n = response.readinto(buffer[got:])
        if not n:
            raise http.client.IncompleteRead(b"", size - got)
        got += n
    return buffer


def slice_ranges(
    status: int, content_range: str | None, body: memoryview, batch: Sequence[tuple[int, int]], what: str
) -> list[memoryview]:
    """The bytes of each ``(offset, length)`` of ``batch`` (views, no copy) out of a single-range
    answer: a 200 (the whole object, sliced at the offsets) or a 206 (one range, placed by its
    ``Content-Range``). The one reader of such answers, for the hub's (HubClient) and the store's.
    Raises HubError naming ``what`` (a 206 without a valid Content-Range, an answer not covering
    a range of ``batch``)."""
    first = 0
    if status == 206:
        m = _CONTENT_RANGE.fullmatch(content_range or "")
        if not m:
            raise HubError(f"{what}: 206 without a valid Content-Range")
        first = int(m.group(1))
    for offset, size in batch:
        if offset < first or offset - first + size > len(body):
            raise HubError(f"{what}: the answer does not cover bytes {offset}-{offset + size - 1}")
    return [body[offset - first : offset - first + size] for offset, size in batch]


def _short(url: str) -> str:
    """A URL without its query (a presigned URL's signature stays out of messages)."""
    return url.split("?", 1)[0]
