"""Prometheus metrics for the hub, and the ASGI middleware that feeds the HTTP ones.

:class:`HubMetrics` owns its own ``CollectorRegistry`` (never the process-global one), so
several apps in one test process do not collide. The registry layer updates the storage,
chunk and GC metrics through the public attributes or the ``record_*`` helpers; the
middleware from :func:`metrics_middleware` does the HTTP ones.

Route labels are the route *template* (``/v2/{ns}/{repo}/blobs/{digest}``), never the raw
path, so label cardinality stays bounded. Litestar 2.25's router writes the template into
``scope["path_template"]`` before it calls the route's middleware stack; a mounted ASGI app
gets ``""`` there, so we label it ``<mount path>/*``; a request that matched no route
(404/405 raised by the router itself) is labelled ``<unmatched>``.

Where to install the middleware: ``Litestar(middleware=[metrics_middleware(m)])`` runs it
per route, *after* routing, so requests that match no route never reach it. Wrapping the
whole app instead (``metrics_middleware(m)(app)``) sees those too; the template is read
when the response starts, by which time the router has filled it in.

:class:`Exchange` (the receive/send wrapper that counts body bytes without buffering them
and captures the status) is shared with ``hub_server.logs``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = [
    "UNMATCHED_ROUTE",
    "Exchange",
    "HubMetrics",
    "method_label",
    "metrics_middleware",
    "route_template",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

UNMATCHED_ROUTE = "<unmatched>"
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: Blob transfers take minutes, so the buckets go well past Prometheus' default 10 s.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)


class HubMetrics:
    """Every metric the hub exports, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http_requests = Counter(
            "forkd_hub_http_requests", "HTTP requests handled", ["route", "method", "status"], registry=r
        )
        self.http_request_duration = Histogram(
            "forkd_hub_http_request_duration_seconds",
            "Time from receiving a request to sending the last response byte",
            ["route", "method"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.bytes_in = Counter("forkd_hub_bytes_in", "Request body bytes received", registry=r)
        self.bytes_out = Counter("forkd_hub_bytes_out", "Response body bytes sent", registry=r)
        self.chunks_deduplicated = Counter(
            "forkd_hub_chunks_deduplicated",
            "Chunks a pusher did not upload because the hub had them",
            registry=r,
        )
        self.chunks_stored = Counter("forkd_hub_chunks_stored", "Chunks stored in pushed data blobs", registry=r)
        self.push_sha256_bytes = Counter(
            "forkd_hub_push_sha256_bytes",
            "Bytes of assembled files hashed at push to prove the whole-file sha256 a layer declares",
            registry=r,
        )
        self.gc_runs = Counter("forkd_hub_gc_runs", "Garbage collection runs", ["result"], registry=r)
        self.gc_deleted_bytes = Counter("forkd_hub_gc_deleted_bytes", "Bytes deleted by garbage collection", registry=r)
        self.storage_used_bytes = Gauge("forkd_hub_storage_used_bytes", "Bytes held by the blob store", registry=r)
        self.repositories = Gauge(
            "forkd_hub_repositories",
            "Repositories in the hub, by visibility (the private count is shown to admin tokens only)",
            ["visibility"],
            registry=r,
        )
        # what an operator alerts on (docs/operations.md, "Metrics and alerts")
        self.dependency_up = Gauge(
            "forkd_hub_dependency_up",
            "1 while the dependency (database, storage) answers this process, 0 while it is down",
            ["dependency"],
            registry=r,
        )
        self.dependency_errors = Counter(
            "forkd_hub_dependency_errors",
            "Requests and background rounds that failed because a dependency was unavailable or full",
            ["dependency"],
            registry=r,
        )
        self.upload_failures = Counter(
            "forkd_hub_upload_failures", "Blob upload requests refused or failed, by error code", ["code"], registry=r
        )
        self.upload_lease_takeovers = Counter(
            "forkd_hub_upload_lease_takeovers",
            "Upload sessions taken over from a request that died (a crashed replica, a lost database)",
            registry=r,
        )
        self.gc_last_success = Gauge(
            "forkd_hub_gc_last_success_timestamp_seconds",
            "When this process last finished a garbage collection run without error (Unix time)",
            registry=r,
        )
        self.upload_sessions = Gauge(
            "forkd_hub_upload_sessions", "Upload sessions open in the hub (all replicas)", registry=r
        )
        self.webhook_queue = Gauge(
            "forkd_hub_webhook_deliveries_pending",
            "Webhook deliveries waiting to be sent or retried (all replicas)",
            registry=r,
        )

    def observe_request(
        self, route: str, method: str, status: int, seconds: float, bytes_in: int, bytes_out: int
    ) -> None:
        """Count one finished HTTP request."""
        self.http_requests.labels(route=route, method=method, status=str(status)).inc()
        self.http_request_duration.labels(route=route, method=method).observe(seconds)
        self.bytes_in.inc(bytes_in)
        self.bytes_out.inc(bytes_out)

    def record_chunks(self, *, stored: int = 0, deduplicated: int = 0) -> None:
        """Count chunks a push stored and chunks it reused from the hub."""
        self.chunks_stored.inc(stored)
        self.chunks_deduplicated.inc(deduplicated)

    def record_gc(self, result: str, deleted_bytes: int = 0) -> None:
        """Count one GC run (``result`` e.g. ``"ok"``, ``"error"``, ``"dry_run"``)."""
        self.gc_runs.labels(result=result).inc()
        self.gc_deleted_bytes.inc(deleted_bytes)
        if result == "ok":
            self.gc_last_success.set_to_current_time()

    def render(self, *, include_private: bool = True) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type, for ``GET /metrics``.

        Without ``include_private``, series labelled ``visibility="private"`` are left out.
        """
        text = generate_latest(self.registry)
        if not include_private:
            text = b"".join(line for line in text.splitlines(keepends=True) if _PRIVATE_LABEL not in line)
        return text, CONTENT_TYPE_LATEST


_PRIVATE_LABEL = b'visibility="private"'


def method_label(scope: Scope) -> str:
    """The request method, or ``OTHER`` for anything unusual (a client picks it freely)."""
    method = scope.get("method", "")
    return method if method in _METHODS else "OTHER"


def route_template(scope: Scope) -> str:
    """The bounded route label for a request (see the module docstring)."""
    handler = scope.get("route_handler")
    if handler is not None and getattr(handler, "is_mount", False):
        paths = sorted(getattr(handler, "paths", ()) or ("",))
        return paths[0].rstrip("/") + "/*"
    return scope.get("path_template") or UNMATCHED_ROUTE


class Exchange:
    """One HTTP request's receive/send, wrapped to count body bytes and capture the status.

    Bodies pass through untouched (nothing is buffered). ``extra_headers`` are appended to
    the response start message (how the access log echoes ``X-Request-ID``).
    """

    def __init__(self, receive: Receive, send: Send, extra_headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self._receive = receive
        self._send = send
        self._extra_headers = list(extra_headers)
        self.started = time.perf_counter()
        self.finished: float | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.status: int | None = None

    async def receive(self) -> Message:
        message = await self._receive()
        if message.get("type") == "http.request":
            self.bytes_in += len(message.get("body", b""))
        return message

    async def send(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            self.status = int(message["status"])
            if self._extra_headers:
                message = {**message, "headers": [*message.get("headers", ()), *self._extra_headers]}
        elif kind == "http.response.body":
            self.bytes_out += len(message.get("body", b""))
            if not message.get("more_body", False):
                self.finished = time.perf_counter()
        await self._send(message)

    def final_status(self, failed: bool) -> int:
        """The status sent; 500 if the app failed before starting a response, 499 (nginx's
        "client closed request") if it returned without one."""
        if self.status is not None:
            return self.status
        return 500 if failed else 499

    @property
    def seconds(self) -> float:
        """From the wrapper's creation to the last body byte (or now, if still going)."""
        return (self.finished or time.perf_counter()) - self.started


def metrics_middleware(metrics: HubMetrics) -> Callable[[ASGIApp], ASGIApp]:
    """A middleware factory that counts every HTTP request into ``metrics``.

    Use it as ``Litestar(middleware=[metrics_middleware(m)])`` or wrap an ASGI app with
    ``metrics_middleware(m)(app)``. Non-HTTP scopes pass through untouched.
    """

    def wrap(app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            if scope.get("type") != "http":
                await app(scope, receive, send)
                return
            exchange = Exchange(receive, send)
            failed = False
            try:
                await app(scope, exchange.receive, exchange.send)
            except BaseException:
                failed = True
                raise
            finally:
                metrics.observe_request(
                    route_template(scope),
                    method_label(scope),
                    exchange.final_status(failed),
                    exchange.seconds,
                    exchange.bytes_in,
                    exchange.bytes_out,
                )

        return middleware

    return wrap
