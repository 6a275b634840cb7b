"""HubClient: every HTTP call the forkd client makes, over an injected ``httpx.Client``.

One method per endpoint of docs/http-api.md: here the hub-wide ones (ping, search, upload
sessions by location, presigned store reads, the fleet's inventory reports and placement), and in :class:`~.repository.RepositoryClient`
(``HubClient.repository(name)``) those about one repository, and in :class:`~.account.AccountClient`
(``HubClient.account()``) those about the caller's own token. Unit tests inject ``httpx.MockTransport``;
end-to-end tests pass Litestar's ``TestClient`` (an ``httpx.Client``) or point at a real
server. Every response error becomes a typed :mod:`forkd_client.hub.errors` exception parsed
from the hub's envelope; httpx exceptions never escape this module. All calls have timeouts (seconds
without a byte moving: ``FORKD_TIMEOUT``, :mod:`.retry`), and reads, manifest PUTs and frame queries are
retried through outages (a 503, a replica that died, no answer) while ``FORKD_RETRY_FOR`` allows.
"""

from __future__ import annotations

import http.client
import threading
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from .account import AccountClient
from .errors import HubError, HubUnreachable, NotAHub, Unauthorized
from .lean_httpx import httpx
from .mirrors import MirrorRoute
from .politeness import Patience
from .presigned import PresignedCache, merge_spans, slice_spans
from .repository import (
    ANYWHERE,
    MANIFEST_TYPE,
    MAX_RESPONSE_BYTES,
    STORE_PARALLEL,
    STORE_RANGE_GAP,
    STORE_SPAN_BYTES,
    ChainLink,
    RepositoryClient,
)
from .retry import Retrier, connect_timeout, http_timeout
from .storeget import StoreReader, StoreRefusal
from .transport import make_http_client
from .wire import LOGIN_HINT, error_from, json_object, range_end, redirect_target, same_origin, split_ranges

__all__ = ["ANYWHERE", "LOGIN_HINT", "MANIFEST_TYPE", "ChainLink", "HubClient", "RepositoryClient"]


class HubClient:
    """A client for one hub. ``base_url`` like ``http://127.0.0.1:8080``."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout: float | None = None,
        retrier: Retrier | None = None,
        mirrors: Sequence[str] = (),
    ) -> None:
        """``timeout``: seconds a request may wait without a byte moving (default ``FORKD_TIMEOUT``, 120);
        ``retrier``: how outages are ridden out (default: ``FORKD_RETRY_FOR``, silent); ``mirrors``: send reads
        (GET, HEAD) to the first of these that answers, then to the hub (:mod:`.mirrors`; pulls only, never a push)."""
        timeout = http_timeout() if timeout is None else timeout
        self.base_url = base_url.rstrip("/")
        self._owns_http = http is None
        self.retrier = retrier or Retrier()
        self.http = http or make_http_client(timeout, connect=connect_timeout())
        # presigned store ranges: read into preallocated buffers, unless the caller brought its own
        # httpx client (tests, hooks) or a proxy is configured (httpx honours it; storeget does not)
        self._store = StoreReader(timeout) if http is None and not urllib.request.getproxies() else None
        self.token = token
        self.bytes_sent = 0
        self.bytes_received = 0
        self._count_lock = threading.Lock()
        self._presigned = PresignedCache()
        self.patience = Patience()
        """How 429s are waited out (``politeness.py``); tests inject its ``sleep`` and ``say``."""
        self.mirror_route = MirrorRoute(self.base_url, mirrors) if mirrors else None
        """Where reads go when mirrors are configured; ``mirror_route.served_by`` names the mirror that served."""

    def close(self) -> None:
        if self._owns_http:
            self.http.close()
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else self.base_url + path

    def _request(
        self,
        method: str,
        path: str,
        *,
        ok: Iterable[int] = (200,),
        follow: bool = True,
        max_bytes: int = MAX_RESPONSE_BYTES,
        retry: bool | None = None,
        **kw: Any,
    ) -> httpx.Response:
        """Send one request; read at most ``max_bytes`` of the answer (a hostile or broken hub
        cannot make the client buffer more), raise the typed error of a refusal. ``retry``: repeat it
        through transient failures (:mod:`.retry`); by default only GET and HEAD are."""
        if retry is None:
            retry = method in ("GET", "HEAD")
        if not retry:
            return self._request_once(method, path, ok=ok, follow=follow, max_bytes=max_bytes, **kw)
        return self.retrier.run(
            f"{method} {path.split('?', 1)[0]}",
            lambda: self._request_once(method, path, ok=ok, follow=follow, max_bytes=max_bytes, **kw),
        )

    def _request_once(
        self,
        method: str,
        path: str,
        *,
        ok: Iterable[int] = (200,),
        follow: bool = True,
        max_bytes: int = MAX_RESPONSE_BYTES,
        **kw: Any,
    ) -> httpx.Response:
        headers = dict(kw.pop("headers", None) or {})
        if self.token and "Authorization" not in headers and (path.startswith("/") or same_origin(path, self.base_url)):
            headers["Authorization"] = f"Bearer {self.token}"
        content = kw.get("content")
        try:
            response = self._send_patiently(method, self.url(path), headers, max_bytes, **kw)
            target = redirect_target(response) if follow and method in ("GET", "HEAD") else None
            if target is not None:
                # A presigned object-store URL: follow it with the same Range but never our token.
                forwarded = {k: v for k, v in headers.items() if k.lower() != "authorization"}
                response = self._send(
                    method, target, forwarded, max_bytes, **{k: v for k, v in kw.items() if k != "json"}
                )
            if method == "HEAD" and response.status_code == 401:
                # a HEAD answer has no body: ask once with GET for the envelope that says why (expired,
                # revoked, unknown token), so a CI log does not just say "HTTP 401"
                probe = self._send("GET", self.url(path), headers, 64 << 10, **kw)
                response = probe if probe.status_code == 401 else response
        except httpx.TimeoutException as e:
            raise HubUnreachable(f"hub {self.base_url} timed out on {method} {path}: {e}") from None
        except httpx.TransportError as e:
            raise HubUnreachable(f"hub {self.base_url} is unreachable ({method} {path}): {e}") from None
        with self._count_lock:
            if isinstance(content, (bytes, bytearray, memoryview)):
                self.bytes_sent += len(content)
            self.bytes_received += len(response.content)
        if response.status_code not in set(ok):
            raise error_from(response, method, path, anonymous="Authorization" not in headers)
        return response

    def _send_patiently(
        self, method: str, url: str, headers: dict[str, str], max_bytes: int, **kw: Any
    ) -> httpx.Response:
        """:meth:`_send`, a 429 waited out and sent again as :class:`~.politeness.Patience` allows (only a
        request whose body is absent or bytes: it can be sent again as it was)."""
        response = self._send(method, url, headers, max_bytes, **kw)
        resendable = isinstance(kw.get("content"), (bytes, bytearray, memoryview, type(None)))
        attempt, waited = 0, 0.0
        while response.status_code == 429 and resendable:
            attempt += 1
            where = url.split("?", 1)[0].removeprefix(self.base_url)
            delay = self.patience.wait(attempt, response.headers.get("retry-after"), f"{method} {where}", waited)
            if delay is None:
                break
            waited += delay
            response = self._send(method, url, headers, max_bytes, **kw)
        return response

    def _send(self, method: str, url: str, headers: dict[str, str], max_bytes: int, **kw: Any) -> httpx.Response:
        """One request; a read of the hub's goes to its first live mirror (an unreachable mirror or its 5xx: the
        next one, then the hub; that mirror is skipped from then on)."""
        route = self.mirror_route
        if route is not None and method in ("GET", "HEAD"):
            for mirror in route.live():
                target = route.rebase(url, mirror)
                if target is None:
                    break
                try:
                    response = self._send_once(method, target, headers, max_bytes, **kw)
                except httpx.TransportError as e:
                    self._skip_mirror(mirror, f"unreachable: {e}")
                    continue
                if response.status_code >= 500:
                    self._skip_mirror(mirror, f"it answered HTTP {response.status_code}")
                    continue
                route.served_by = mirror
                return response
        return self._send_once(method, url, headers, max_bytes, **kw)

    def _skip_mirror(self, mirror: str, why: str) -> None:
        assert self.mirror_route is not None
        self.mirror_route.skip(mirror)
        if self.retrier.notice is not None:
            self.retrier.notice(f"mirror {mirror} skipped for the rest of this command ({why})")

    def _send_once(self, method: str, url: str, headers: dict[str, str], max_bytes: int, **kw: Any) -> httpx.Response:
        request = self.http.build_request(method, url, headers=headers, **kw)
        response = self.http.send(request, stream=True)
        try:
            declared = response.headers.get("content-length")
            # a HEAD's Content-Length is the size of what a GET would send, not of this answer
            if method != "HEAD" and declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise HubError(
                    f"{method} {url}: the hub answered {int(declared):,} bytes, more than the "
                    f"{max_bytes:,} this request can need"
                )
            parts, total = [], 0
            for part in response.iter_bytes():
                total += len(part)
                if total > max_bytes:
                    raise HubError(
                        f"{method} {url}: the hub sent more than the {max_bytes:,} bytes this request can need"
                    )
                parts.append(part)
        finally:
            response.close()
            # httpx binds the streamed response and its stream to each other (a cycle), and the
            # response holds the request, whose body is a whole upload part: left to the cyclic
            # GC, a push of a 16 GiB base kept a dozen or more parts (16 MiB each) alive. Break it.
            response.stream = httpx.ByteStream(b"")
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            content=b"".join(parts),
            request=request,
            extensions=response.extensions,
        )

    # -- repositories and catalog -------------------------------------------------------------

    def repository(self, name: str) -> RepositoryClient:
        """The calls about repository ``name`` (``ns/repo``): manifests, tags, blobs, uploads, chains."""
        return RepositoryClient(self, name)

    def account(self) -> AccountClient:
        """The calls about this client's own token: who it is, the tokens it makes, its namespaces' audit log."""
        return AccountClient(self)

    def ping(self) -> None:
        """Check that ``base_url`` is a forkd hub that accepts this client's token.

        Raises: Unauthorized (the token is refused), NotAHub (``/v2/`` does not answer as a hub does:
        200 or 401 with ``Docker-Distribution-Api-Version``), HubUnreachable."""
        try:
            response = self._request("GET", "/v2/")
        except Unauthorized:
            raise
        except HubError as e:
            if isinstance(e, HubUnreachable):
                raise
            raise NotAHub(self.base_url, f"GET /v2/ answered HTTP {e.status}") from None
        if "docker-distribution-api-version" not in response.headers:
            raise NotAHub(self.base_url, "GET /v2/ answered without Docker-Distribution-Api-Version")

    def search(self, query: str = "", namespace: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"q": query, "n": limit}
        if namespace:
            params["namespace"] = namespace
        return list(
            json_object(self._request("GET", "/api/v1/repositories", params=params), "search").get("repositories", [])
        )

    # -- the fleet (docs/placement.md) ---------------------------------------------------------------

    def report_inventory(self, host: str, report: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/nodes/{host}/reports``: this host's inventory; the hub's acknowledgement
        (``generation``, ``layers``, ``partial``, ``expiresIn``). Raises the typed refusal."""
        path = f"/api/v1/nodes/{quote(host, safe='')}/reports"
        return json_object(self._request("POST", path, json=report), "inventory report")

    def placement(self, request: dict[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/placement``: hosts ranked by what they miss of a chain. Raises the typed refusal."""
        return json_object(self._request("POST", "/api/v1/placement", json=request), "placement")

    def store_ranges(self, target: str, batch: Sequence[tuple[int, int]], digest: str) -> list[memoryview]:
        """``batch`` from a presigned object-store URL, without our token: one GET per merged span
        (``presigned.merge_spans``), STORE_PARALLEL at a time."""
        spans = merge_spans(batch, STORE_RANGE_GAP, STORE_SPAN_BYTES)

        def get(span: tuple[int, int]) -> memoryview:
            return self.store_range(target, span[0], span[1], digest)

        if len(spans) == 1:
            return slice_spans(batch, spans, [get(spans[0])])
        with ThreadPoolExecutor(max_workers=min(STORE_PARALLEL, len(spans))) as pool:
            return slice_spans(batch, spans, list(pool.map(get, spans)))

    def store_range(self, url: str, start: int, end: int, digest: str) -> memoryview:
        """Bytes ``[start, end)`` of a presigned object-store URL (never with our token).

        Raises: the typed error of the store's refusal (an expired URL: Forbidden), HubError (an
        answer that is too large or does not cover the range), HubUnreachable (transport)."""
        if self._store is not None:
            return self._store_range_direct(self._store, url, start, end)
        r = self._request(
            "GET",
            url,
            headers={"Range": f"bytes={start}-{end - 1}"},
            ok=(200, 206),
            follow=False,
            max_bytes=end - start + 4096,
        )
        return split_ranges(r, [(start, end - start)], digest)[0]

    def _store_range_direct(self, store: StoreReader, url: str, start: int, end: int) -> memoryview:
        """``_store_range`` through :class:`.storeget.StoreReader` (one buffer per body, no httpx)."""
        where = url.split("?", 1)[0]  # the signature stays out of messages
        try:
            body = store.get_range(url, start, end)
        except StoreRefusal as refusal:
            answer = httpx.Response(refusal.status, headers=refusal.headers, content=refusal.body)
            raise error_from(answer, "GET", where, anonymous=True) from None
        except TimeoutError as e:
            raise HubUnreachable(f"the object store timed out on GET {where}: {e}") from None
        except (OSError, http.client.HTTPException) as e:
            raise HubUnreachable(f"the object store is unreachable (GET {where}): {type(e).__name__}: {e}") from None
        with self._count_lock:
            self.bytes_received += len(body)
        return body

    def upload_offset(self, location: str) -> int:
        """How many bytes of an upload the hub has committed (for resume)."""
        r = self._request("GET", location, ok=(204, 200))
        if "upload-offset" in r.headers:
            return int(r.headers["upload-offset"])
        return range_end(r.headers.get("range"))

    def upload_chunk(self, location: str, data: bytes, offset: int) -> str:
        r = self._request(
            "PATCH",
            location,
            content=data,
            ok=(202,),
            headers={
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{offset}-{offset + len(data) - 1}",
            },
        )
        return r.headers.get("location", location)

    def finish_upload(self, location: str, digest: str) -> None:
        sep = "&" if "?" in location else "?"
        self._request("PUT", f"{location}{sep}digest={digest}", content=b"", ok=(201,))

    def cancel_upload(self, location: str) -> None:
        self._request("DELETE", location, ok=(204, 200, 404))
