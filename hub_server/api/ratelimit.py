"""Rate limits: token buckets per credential and per client address, anonymous requests apart (docs/limits.md).

A raw ASGI wrapper in front of everything the hub answers (inside the access log and the metrics, so a
refusal is logged and counted). Each request takes one token from the buckets it belongs to:

- a request that carries a credential (``Authorization``, or the web catalog's ``forkd_session``
  cookie): the bucket of that credential (``FORKD_HUB_RATE_TOKEN``; keyed by a hash of it, so a
  forged credential costs no database lookup here and is refused by the route as ever) **and** the
  authenticated bucket of its client address (``FORKD_HUB_RATE_ADDRESS``), so minting or inventing
  credentials does not multiply what one address may send;
- a request without one: the anonymous bucket of its client address (``FORKD_HUB_RATE_ANONYMOUS``),
  apart from the authenticated one, so anonymous pulls of a public repository cannot starve clients
  that signed in.

The client address is what the server saw (uvicorn applies ``X-Forwarded-For`` only from
``FORKD_HUB_FORWARDED_ALLOW_IPS``); an IPv6 address counts as its /64. ``/healthz`` and ``/metrics``
are not limited (load balancers and scrapers). An empty bucket answers ``429 TOOMANYREQUESTS`` with
``Retry-After`` (whole seconds until one token is back) before any route runs.

Per replica: the buckets live in each process's memory (no database round trip per request), so N
replicas behind a balancer let one client send at most N times a bucket's rate and burst; docs/limits.md
says so. At most :data:`MAX_KEYS` buckets of each kind are kept (least recently used dropped first; a
dropped bucket starts full again), so the table's memory is bounded whatever the addresses.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from hub_server.errors import ERRORS, ErrorCode
from hub_server.metrics import ASGIApp, Receive, Scope, Send
from hub_server.settings import RateSpec, Settings

__all__ = ["EXEMPT_PATHS", "MAX_KEYS", "Buckets", "RateLimiter"]

#: Buckets kept per kind (token, address, anonymous): ~100 bytes each.
MAX_KEYS = 65_536
#: Paths never limited.
EXEMPT_PATHS = frozenset({"/healthz", "/metrics"})
_SESSION_COOKIE = b"forkd_session="


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class Buckets:
    """Token buckets of one :class:`RateSpec`, by key; ``clock`` in seconds (monotonic; injectable)."""

    def __init__(self, spec: RateSpec, clock: Callable[[], float] = time.monotonic, max_keys: int = MAX_KEYS) -> None:
        self.spec = spec
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()

    def take(self, key: str) -> float:
        """Take one token from ``key``'s bucket: 0.0 when there was one, else the seconds until there is."""
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.spec.burst), now)
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
            bucket.tokens = min(float(self.spec.burst), bucket.tokens + (now - bucket.stamp) * self.spec.rate)
            bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.spec.rate

    def __len__(self) -> int:
        return len(self._buckets)


def client_key(scope: Scope) -> str:
    """The client address as a bucket key: an IPv6 address as its /64."""
    client = scope.get("client")
    host = str(client[0]) if client else "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6 and getattr(address, "ipv4_mapped", None) is None:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(getattr(address, "ipv4_mapped", None) or address)


def credential_of(scope: Scope) -> str | None:
    """A hash of the request's credential (``Authorization``, else the ``forkd_session`` cookie), or None."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization" and value.strip():
            return hashlib.sha256(value.strip()).hexdigest()[:32]
    for name, value in scope.get("headers", ()):
        if name == b"cookie" and _SESSION_COOKIE in value:
            cookie = value.split(_SESSION_COOKIE, 1)[1].split(b";", 1)[0].strip()
            if cookie:
                return hashlib.sha256(b"cookie:" + cookie).hexdigest()[:32]
    return None


class RateLimiter:
    """The ASGI wrapper. ``refused`` counts 429 answers (tests and probes read it)."""

    def __init__(self, inner: ASGIApp, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = inner
        self.token = Buckets(settings.rate_token, clock) if settings.rate_token else None
        self.address = Buckets(settings.rate_address, clock) if settings.rate_address else None
        self.anonymous = Buckets(settings.rate_anonymous, clock) if settings.rate_anonymous else None
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("path") in EXEMPT_PATHS:
            await self.inner(scope, receive, send)
            return
        wait, limit = self._take(scope)
        if wait <= 0.0:
            await self.inner(scope, receive, send)
            return
        self.refused += 1
        await _refuse(send, wait, limit)

    def _take(self, scope: Scope) -> tuple[float, str]:
        """The seconds to wait (0: go on) and which limit said so."""
        address = client_key(scope)
        credential = credential_of(scope)
        if credential is None:
            if self.anonymous is not None:
                wait = self.anonymous.take(address)
                if wait:
                    return wait, "anonymous requests per address"
            return 0.0, ""
        waits = []
        if self.token is not None:
            waits.append((self.token.take(credential), "requests per token"))
        if self.address is not None:
            waits.append((self.address.take(address), "requests per address"))
        return max(waits, default=(0.0, ""))


async def _refuse(send: Send, wait: float, limit: str) -> None:
    retry_after = max(1, math.ceil(wait))
    spec = ERRORS[ErrorCode.TOOMANYREQUESTS]
    body = json.dumps(
        {
            "errors": [
                {
                    "code": ErrorCode.TOOMANYREQUESTS.value,
                    "message": f"{spec.message}: {limit} over its limit; retry after {retry_after} s",
                    "detail": {"limit": limit, "retryAfter": retry_after},
                }
            ]
        },
        separators=(",", ":"),
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(retry_after).encode()),
    ]
    await send({"type": "http.response.start", "status": spec.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
