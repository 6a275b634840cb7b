"""The hub client's HTTP transport: TLS is set up only when a request needs it.

Building an ``ssl.SSLContext`` with the system's CA certificates costs ~80 ms, a twentieth of a
cold chain pull, and a hub on plain http (loopback, a LAN) never needs one unless it redirects
to https (presigned S3 URLs). :class:`LazyTLSTransport` sends http requests through a transport
without certificates and builds the certificate-verifying https transport on first use.
Proxies configured in the environment (``HTTPS_PROXY`` and friends) are httpx's business:
:func:`make_http_client` then builds httpx's default client, which honours them.

Errors: whatever httpx raises (``httpx.TransportError``); the HubClient turns them into
HubUnreachable.
"""

from __future__ import annotations

import threading
import urllib.request

from .lean_httpx import httpx


class LazyTLSTransport(httpx.BaseTransport):
    """http through a plain transport, https through a verifying one built on first use."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._plain = httpx.HTTPTransport(verify=False, limits=limits)  # never used for https
        self._tls: httpx.HTTPTransport | None = None
        self._lock = threading.Lock()

    @property
    def tls_ready(self) -> bool:
        return self._tls is not None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "https":
            return self._plain.handle_request(request)
        with self._lock:
            if self._tls is None:
                self._tls = httpx.HTTPTransport(verify=True, limits=self._limits)
        return self._tls.handle_request(request)

    def close(self) -> None:
        self._plain.close()
        if self._tls is not None:
            self._tls.close()


def make_http_client(
    timeout: float, *, connect: float = 10.0, max_connections: int = 16, keepalive: int = 16
) -> httpx.Client:
    """The client HubClient uses by default: bounded pool, no automatic redirects. ``timeout`` bounds each
    read and write (seconds without a byte moving, never a whole request); ``connect`` opening a connection."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=keepalive)
    options = {"timeout": httpx.Timeout(timeout, connect=connect), "follow_redirects": False}
    if urllib.request.getproxies():
        return httpx.Client(limits=limits, **options)  # type: ignore[arg-type]
    return httpx.Client(transport=LazyTLSTransport(limits), **options)  # type: ignore[arg-type]
