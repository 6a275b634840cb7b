"""HubClient: every HTTP call the forkd client makes, over an injected ``httpx.Client``.

One method per endpoint of docs/http-api.md. Unit tests inject ``httpx.MockTransport``;
end-to-end tests pass Litestar's ``TestClient`` (an ``httpx.Client``) or point at a real
server. Every response error becomes a typed :mod:`forkd_client.hub.errors` exception parsed
from the hub's envelope; httpx exceptions never escape this module. All calls have timeouts.
"""

from __future__ import annotations

import bisect
import http.client
import re
import threading
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from manifest.digest import digest_bytes, parse_digest
from manifest.jsontext import loads as loads_json
from manifest.mediatypes import BLOB_PLAN
from manifest.model import MAX_MANIFEST_BYTES

from .errors import (
    DigestInvalid,
    Forbidden,
    HasDependents,
    HubError,
    HubUnreachable,
    NotFound,
    SignatureRequired,
    TagConflict,
    Unauthorized,
)
from .lean_httpx import httpx
from .presigned import PresignedCache, merge_spans, parse_plan, read_plan, slice_spans
from .storeget import StoreReader, StoreRefusal, slice_ranges
from .transport import make_http_client

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
QUERY_BATCH = 10_000
#: largest answer read for anything but blob ranges: a chunk map may be 64 MiB
MAX_RESPONSE_BYTES = 80 << 20
MAX_RANGES_PER_REQUEST = 256
REDIRECTS = (301, 302, 303, 307, 308)
#: Ranges fetched from a presigned object-store URL: merged across gaps up to this, into GETs of at
#: most STORE_SPAN_BYTES, STORE_PARALLEL at a time (per read_ranges call).
STORE_RANGE_GAP = 256 << 10
STORE_SPAN_BYTES = 16 << 20
STORE_PARALLEL = 8
#: A blob range GET accepts the bytes, a redirect, or (a recipe blob on S3) a fetch plan of pack ranges.
ACCEPT_RANGES = f"{BLOB_PLAN}, application/octet-stream;q=0.9, */*;q=0.5"
#: Room for a fetch plan's JSON (sources, segments) beyond the bytes asked for.
PLAN_BYTES = 64 << 10
ANYWHERE = object()
"""``put_manifest(expect=ANYWHERE)``: move the tag whatever it points at (``forkd push --force``)."""


@dataclass(frozen=True)
class ChainLink:
    """One layer of a chain as the hub returned it; ``manifest``/``config`` are the exact bytes."""

    digest: str
    manifest: bytes
    config: bytes
    repository: str
    tags: tuple[str, ...]


class HubClient:
    """A client for one hub. ``base_url`` like ``http://127.0.0.1:8080``."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._owns_http = http is None
        self.http = http or make_http_client(timeout)
        # presigned store ranges: read into preallocated buffers, unless the caller brought its own
        # httpx client (tests, hooks) or a proxy is configured (httpx honours it; storeget does not)
        self._store = StoreReader(timeout) if http is None and not urllib.request.getproxies() else None
        self.token = token
        self.bytes_sent = 0
        self.bytes_received = 0
        self._count_lock = threading.Lock()
        self._presigned = PresignedCache()

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
        **kw: Any,
    ) -> httpx.Response:
        """Send one request; read at most ``max_bytes`` of the answer (a hostile or broken hub
        cannot make the client buffer more), raise the typed error of a refusal."""
        headers = dict(kw.pop("headers", None) or {})
        if (
            self.token
            and "Authorization" not in headers
            and (path.startswith("/") or _same_origin(path, self.base_url))
        ):
            headers["Authorization"] = f"Bearer {self.token}"
        content = kw.get("content")
        try:
            response = self._send(method, self.url(path), headers, max_bytes, **kw)
            target = _redirect_target(response) if follow and method in ("GET", "HEAD") else None
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
            raise _error_from(response, method, path, anonymous="Authorization" not in headers)
        return response

    def _send(self, method: str, url: str, headers: dict[str, str], max_bytes: int, **kw: Any) -> httpx.Response:
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

    def ping(self) -> None:
        self._request("GET", "/v2/")

    def search(self, query: str = "", namespace: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"q": query, "n": limit}
        if namespace:
            params["namespace"] = namespace
        return list(
            _json_object(self._request("GET", "/api/v1/repositories", params=params), "search").get("repositories", [])
        )

    def repository(self, name: str) -> dict[str, Any]:
        return _json_object(self._request("GET", f"/api/v1/repositories/{name}"), f"repository {name}")

    def set_repository(
        self, name: str, *, public: bool | None = None, description: str | None = None
    ) -> dict[str, Any]:
        body = {k: v for k, v in (("public", public), ("description", description)) if v is not None}
        return _json_object(self._request("PATCH", f"/api/v1/repositories/{name}", json=body), f"repository {name}")

    def lineage(self, name: str, ref: str) -> dict[str, Any]:
        return _json_object(
            self._request("GET", f"/api/v1/repositories/{name}/lineage/{ref}"), f"lineage of {name}:{ref}"
        )

    def delete(self, name: str, ref: str, *, cascade: bool = False, force: bool = False) -> dict[str, Any]:
        params = {k: "true" for k, v in (("cascade", cascade), ("force", force)) if v}
        response = self._request("DELETE", f"/v2/{name}/manifests/{ref}", params=params, ok=(200, 202, 204))
        return _json_object(response, f"delete {name}:{ref}") if response.content else {}

    # -- manifests ------------------------------------------------------------------------------

    def manifest_exists(self, name: str, ref: str) -> bool:
        try:
            self._request("HEAD", f"/v2/{name}/manifests/{ref}", headers={"Accept": MANIFEST_TYPE})
        except NotFound:
            return False
        return True

    def get_manifest(self, name: str, ref: str) -> tuple[bytes, str]:
        """The exact manifest bytes and their digest (verified when ``ref`` is a digest)."""
        r = self._request(
            "GET", f"/v2/{name}/manifests/{ref}", headers={"Accept": MANIFEST_TYPE}, max_bytes=MAX_MANIFEST_BYTES
        )
        data = r.content
        if ref.count(":") == 1 and len(ref) > 70:
            _verify(data, ref, f"manifest {name}@{ref}")
            return data, ref
        digest = r.headers.get("docker-content-digest") or str(digest_bytes(data))
        _verify(data, digest, f"manifest {name}:{ref}")
        return data, digest

    def put_manifest(
        self,
        name: str,
        ref: str,
        data: bytes,
        *,
        media_type: str = MANIFEST_TYPE,
        public: bool = False,
        expect: str | object | None = ANYWHERE,
    ) -> str:
        """PUT a manifest; for a tag ``ref``, ``expect`` is where the tag must still point (a digest,
        ``None`` for "no such tag yet", or ANYWHERE). Raises TagConflict when it moved meanwhile."""
        params = {"public": "true"} if public else {}
        headers = {"Content-Type": media_type}
        if expect is None:
            headers["If-None-Match"] = "*"
        elif isinstance(expect, str):
            headers["If-Match"] = f'"{expect}"'
        r = self._request("PUT", f"/v2/{name}/manifests/{ref}", content=data, params=params, headers=headers, ok=(201,))
        return r.headers.get("docker-content-digest", str(digest_bytes(data)))

    def tag_digest(self, name: str, tag: str) -> str | None:
        """The digest ``tag`` points at, or None if there is no such tag (or repository)."""
        try:
            r = self._request("HEAD", f"/v2/{name}/manifests/{tag}")
        except NotFound:
            return None
        return r.headers.get("docker-content-digest")

    def referrers(self, name: str, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        """Descriptors of the manifests in ``name`` whose subject is ``digest`` (OCI referrers API),
        only those of ``artifact_type`` when given. Raises HubError on a malformed answer."""
        params = {"artifactType": artifact_type} if artifact_type else {}
        r = self._request("GET", f"/v2/{name}/referrers/{digest}", params=params)
        found = _json_object(r, f"referrers of {name}@{digest}").get("manifests", [])
        if not isinstance(found, list) or not all(isinstance(d, dict) for d in found):
            raise HubError(f"hub sent a malformed referrers index for {name}@{digest}")
        return found

    def get_chain(self, name: str, ref: str) -> list[ChainLink]:
        """The chain base → head, each manifest's bytes verified against its digest."""
        r = self._request("GET", f"/api/v1/repositories/{name}/chain/{ref}")
        links = []
        try:
            for item in _json_object(r, f"chain of {name}:{ref}").get("chain", []):
                manifest = item["manifest"].encode()
                _verify(manifest, item["digest"], f"manifest {item['digest']}")
                links.append(
                    ChainLink(
                        item["digest"],
                        manifest,
                        item["config"].encode(),
                        item.get("repository", name),
                        tuple(item.get("tags", [])),
                    )
                )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise HubError(f"hub sent a malformed chain for {name}:{ref}: {type(e).__name__}: {e}") from None
        if not links:
            raise HubError(f"hub returned an empty chain for {name}:{ref}")
        return links

    # -- blobs ----------------------------------------------------------------------------------

    def blob_exists(self, name: str, digest: str) -> bool:
        try:
            self._request("HEAD", f"/v2/{name}/blobs/{digest}")
        except NotFound:
            return False
        return True

    def blob_size(self, name: str, digest: str) -> int:
        """Size of a blob in the repository (HEAD). Raises NotFound."""
        r = self._request("HEAD", f"/v2/{name}/blobs/{digest}")
        return int(r.headers.get("content-length", "0"))

    def get_blob(self, name: str, digest: str, size: int | None = None, *, limit: int = MAX_RESPONSE_BYTES) -> bytes:
        """A whole blob, verified against its digest.

        ``size`` (from its descriptor, i.e. from the hub) is what the blob must hold; ``limit`` is
        our own bound for this kind of blob: a descriptor over it is refused before anything is
        requested, and the read never buffers more than ``min(size, limit)`` bytes.

        Raises: HubError (a descriptor over ``limit``, an answer over it), DigestInvalid, NotFound.
        """
        if size is not None and size > limit:
            raise HubError(
                f"blob {digest}: its descriptor declares {size:,} bytes, over the {limit:,} bytes "
                f"this client accepts for it"
            )
        bound = min(size, limit) if size is not None else limit
        data = self._request("GET", f"/v2/{name}/blobs/{digest}", max_bytes=bound).content
        if size is not None and len(data) != size:
            raise DigestInvalid(
                f"blob {digest}: the hub sent {len(data)} bytes, its descriptor says {size}", code="DIGEST_INVALID"
            )
        _verify(data, digest, f"blob {digest}")
        return data

    def read_ranges(self, name: str, digest: str, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Bytes of several ``(offset, length)`` ranges of one blob, in the order given, as views
        into the response bodies (no copies).

        Sends at most MAX_RANGES_PER_REQUEST ranges per request; the caller verifies content
        (each range holds whole chunk frames whose digests it knows).
        """
        out: list[memoryview] = []
        for start in range(0, len(ranges), MAX_RANGES_PER_REQUEST):
            batch = ranges[start : start + MAX_RANGES_PER_REQUEST]
            out.extend(self.open_ranges(name, digest, batch)(batch))
        return out

    def open_ranges(
        self, name: str, digest: str, batch: Sequence[tuple[int, int]]
    ) -> Callable[[Sequence[tuple[int, int]]], list[memoryview]]:
        """Ask the hub once for ``batch`` (at most MAX_RANGES_PER_REQUEST ranges of blob ``digest``) and
        return a reader: ``reader(pieces)`` gives the bytes of ``pieces``, each inside one range of
        ``batch``, in their order. Where the hub sent the bytes, the reader slices them (no copy);
        where it redirected or sent a fetch plan, each call fetches its pieces from the store, so a
        caller can split a batch into pieces fetched (and verified) in parallel.

        Raises: HubError (a malformed plan, an oversized answer), the hub's refusals; the reader
        raises what the store fetch raises.
        """
        if len(batch) > MAX_RANGES_PER_REQUEST:
            raise HubError(f"blob {digest}: {len(batch)} ranges in one request, over {MAX_RANGES_PER_REQUEST}")
        spec = ",".join(f"{o}-{o + n - 1}" for o, n in batch)
        need = sum(n for _, n in batch)
        bound = need + 256 * len(batch) + 4096
        plan_room = need + PLAN_BYTES  # a fetch plan of tiny interleaved frames can outweigh their bytes
        target = self._presigned.get(name, digest)
        if target is not None:
            return self._cached_reader(name, digest, target)
        r = self._request(
            "GET",
            f"/v2/{name}/blobs/{digest}",
            headers={"Range": f"bytes={spec}", "Accept": ACCEPT_RANGES},
            ok=(200, 206, *REDIRECTS),
            follow=False,
            max_bytes=bound + plan_room,
        )
        if r.status_code == 200 and r.headers.get("content-type", "").startswith(BLOB_PLAN):
            plan = parse_plan(_json_object(r, f"the fetch plan of blob {digest}"), digest, batch)
            return lambda pieces: read_plan(
                plan,
                pieces,
                STORE_RANGE_GAP,
                STORE_SPAN_BYTES,
                lambda url, start, end: self._store_range(url, start, end, digest),
                STORE_PARALLEL,
            )
        if len(r.content) > bound:  # bytes, not a plan: held to what the ranges need
            raise HubError(f"GET blob {digest}: the hub sent more than the {bound:,} bytes this request can need")
        target = _redirect_target(r)
        if target is None:
            return _slicer(batch, _split_ranges(r, batch, digest), digest)
        self._presigned.remember(name, digest, target)
        return lambda pieces: self._ranges_from_store(target, pieces, digest)

    def _cached_reader(
        self, name: str, digest: str, target: str
    ) -> Callable[[Sequence[tuple[int, int]]], list[memoryview]]:
        """A reader from a remembered presigned URL; when the store refuses it (expired), the hub is asked again."""

        def read(pieces: Sequence[tuple[int, int]]) -> list[memoryview]:
            try:
                return self._ranges_from_store(target, pieces, digest)
            except HubError:
                self._presigned.forget(name, digest)
                return self.open_ranges(name, digest, pieces)(pieces)

        return read

    def _ranges_from_store(self, target: str, batch: Sequence[tuple[int, int]], digest: str) -> list[memoryview]:
        """``batch`` from a presigned object-store URL, without our token: one GET per merged span
        (``presigned.merge_spans``), STORE_PARALLEL at a time."""
        spans = merge_spans(batch, STORE_RANGE_GAP, STORE_SPAN_BYTES)

        def get(span: tuple[int, int]) -> memoryview:
            return self._store_range(target, span[0], span[1], digest)

        if len(spans) == 1:
            return slice_spans(batch, spans, [get(spans[0])])
        with ThreadPoolExecutor(max_workers=min(STORE_PARALLEL, len(spans))) as pool:
            return slice_spans(batch, spans, list(pool.map(get, spans)))

    def _store_range(self, url: str, start: int, end: int, digest: str) -> memoryview:
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
        return _split_ranges(r, [(start, end - start)], digest)[0]

    def _store_range_direct(self, store: StoreReader, url: str, start: int, end: int) -> memoryview:
        """``_store_range`` through :class:`.storeget.StoreReader` (one buffer per body, no httpx)."""
        where = url.split("?", 1)[0]  # the signature stays out of messages
        try:
            body = store.get_range(url, start, end)
        except StoreRefusal as refusal:
            answer = httpx.Response(refusal.status, headers=refusal.headers, content=refusal.body)
            raise _error_from(answer, "GET", where, anonymous=True) from None
        except TimeoutError as e:
            raise HubUnreachable(f"the object store timed out on GET {where}: {e}") from None
        except (OSError, http.client.HTTPException) as e:
            raise HubUnreachable(f"the object store is unreachable (GET {where}): {type(e).__name__}: {e}") from None
        with self._count_lock:
            self.bytes_received += len(body)
        return body

    def start_upload(self, name: str) -> str:
        r = self._request("POST", f"/v2/{name}/blobs/uploads/", ok=(202,))
        if "location" not in r.headers:
            raise HubError(f"hub started an upload to {name} without a Location header")
        return r.headers["location"]

    def upload_offset(self, location: str) -> int:
        """How many bytes of an upload the hub has committed (for resume)."""
        r = self._request("GET", location, ok=(204, 200))
        if "upload-offset" in r.headers:
            return int(r.headers["upload-offset"])
        return _range_end(r.headers.get("range"))

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

    def query_frames(self, name: str, digests: Sequence[str]) -> set[str]:
        """Which zstd frames (by the blake3 of their bytes) the hub holds in blobs this caller may
        read, in batches of QUERY_BATCH."""
        found: set[str] = set()
        for start in range(0, len(digests), QUERY_BATCH):
            body = {"digests": list(digests[start : start + QUERY_BATCH])}
            r = self._request("POST", f"/api/v1/repositories/{name}/frames/query", json=body)
            try:
                for digest, frame in _json_object(r, f"frames/query answer for {name}").get("found", {}).items():
                    if int(frame["length"]) <= 0:
                        raise ValueError(f"frame {digest} has no length")
                    found.add(str(digest))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise HubError(
                    f"hub sent a malformed frames/query answer for {name}: {type(e).__name__}: {e}"
                ) from None
        return found & set(digests)

    def declare_recipe(self, name: str, location: str, recipe: dict) -> bool:
        """Declare a data blob's recipe on its (still empty) upload session, so the hub verifies each
        frame as it arrives; False from a hub that predates this (it verifies at the finish)."""
        r = self._request("PUT", _recipe_path(name, location), json=recipe, ok=(202, 405))
        return r.status_code == 202

    def finish_recipe(self, name: str, location: str, recipe: dict) -> None:
        """Finish an upload session holding a data blob's new frames with the blob's recipe."""
        self._request("POST", _recipe_path(name, location), json=recipe, ok=(201,))


def _recipe_path(name: str, location: str) -> str:
    upload_id = location.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return f"/api/v1/repositories/{name}/blobs/uploads/{upload_id}/recipe"


def _redirect_target(response: httpx.Response) -> str | None:
    """The absolute URL a redirect points at, or None if ``response`` is not a redirect."""
    if response.status_code not in REDIRECTS or "location" not in response.headers:
        return None
    return str(response.url.join(response.headers["location"]))


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    """The JSON object a hub answered with.

    Raises: HubError naming ``what`` when the answer is not a JSON object (invalid, nested
    deeper than the parser follows, or another type).
    """
    try:
        obj = loads_json(response.content)
    except ValueError as e:  # json.JSONDecodeError, JSONTooDeep, UnicodeDecodeError
        raise HubError(f"hub sent an invalid JSON answer for {what}: {e}") from None
    if not isinstance(obj, dict):
        raise HubError(f"hub sent a JSON {type(obj).__name__} for {what}, not an object")
    return obj


def _same_origin(url: str, base_url: str) -> bool:
    """Whether absolute ``url`` is on the hub itself (scheme and host:port), where the token may go."""
    a, b = urlsplit(url), urlsplit(base_url)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def _verify(data: bytes, digest: str, what: str) -> None:
    want = parse_digest(digest)
    got = digest_bytes(data, want.algorithm)
    if str(got) != digest:
        raise DigestInvalid(f"{what}: digest mismatch: expected {digest}, got {got}", code="DIGEST_INVALID")


def _range_end(header: str | None) -> int:
    if not header:
        return 0
    m = re.fullmatch(r"(?:bytes=)?0-(\d+)", header.strip())
    if not m:
        raise HubError(f"hub sent an invalid upload Range header {header!r}")
    return int(m.group(1)) + 1 if header.strip() not in ("0-0",) else 0


def _slicer(
    batch: Sequence[tuple[int, int]], bodies: list[memoryview], digest: str
) -> Callable[[Sequence[tuple[int, int]]], list[memoryview]]:
    """A reader of pieces of ``batch`` out of its already received ``bodies`` (views, no copies)."""
    starts = sorted(((o, n, body) for (o, n), body in zip(batch, bodies, strict=True)), key=lambda t: t[0])
    offsets = [o for o, _, _ in starts]

    def read(pieces: Sequence[tuple[int, int]]) -> list[memoryview]:
        out = []
        for offset, size in pieces:
            i = bisect.bisect_right(offsets, offset) - 1
            if i < 0 or offset + size > starts[i][0] + starts[i][1]:
                raise HubError(f"blob {digest}: bytes {offset}-{offset + size - 1} were not asked for")
            out.append(starts[i][2][offset - starts[i][0] : offset - starts[i][0] + size])
        return out

    return read


def _split_ranges(r: httpx.Response, batch: Sequence[tuple[int, int]], digest: str) -> list[memoryview]:
    """``batch`` out of an answer to a Range request: a 200 (the hub ignored Range), a single-range
    206 (both :func:`.storeget.slice_ranges`) or a multipart/byteranges 206. Raises HubError."""
    ctype = r.headers.get("content-type", "")
    if r.status_code == 200 or not ctype.startswith("multipart/byteranges"):
        return slice_ranges(
            r.status_code, r.headers.get("content-range"), memoryview(r.content), batch, f"blob {digest}"
        )
    boundary = ctype.split("boundary=", 1)[-1].strip().strip('"').encode()
    parts = _parse_multipart(r.content, boundary)
    out = []
    for o, n in batch:
        data = parts.get(o)
        if data is None or len(data) < n:
            raise HubError(f"blob {digest}: the hub did not return range {o}-{o + n - 1}")
        out.append(data[:n])
    return out


def _parse_multipart(body: bytes, boundary: bytes) -> dict[int, memoryview]:
    """Parse multipart/byteranges by Content-Range lengths (never by searching binary data);
    the parts are views into ``body``."""
    view = memoryview(body)
    parts: dict[int, memoryview] = {}
    delimiter = b"--" + boundary
    pos = body.find(delimiter)
    while pos >= 0:
        pos += len(delimiter)
        if body[pos : pos + 2] == b"--":
            break
        head_end = body.find(b"\r\n\r\n", pos)
        if head_end < 0:
            raise HubError("malformed multipart/byteranges response (no header end)")
        headers = body[pos:head_end].decode("latin-1")
        m = re.search(r"(?im)^content-range:\s*bytes (\d+)-(\d+)/", headers)
        if not m:
            raise HubError("malformed multipart/byteranges response (part without Content-Range)")
        start, end = int(m.group(1)), int(m.group(2))
        data_start = head_end + 4
        parts[start] = view[data_start : data_start + end - start + 1]
        pos = body.find(delimiter, data_start + end - start + 1)
    return parts


#: appended to a 401's message (except during ``forkd login`` itself, which strips it)
LOGIN_HINT = " (run 'forkd login' or set FORKD_TOKEN)"
#: appended to a 404 answered to an anonymous request: the repository may be private
PRIVATE_HINT = " (if it is private, logging in may help: 'forkd login HUB_URL' or FORKD_TOKEN)"


def _error_from(response: httpx.Response, method: str, path: str, *, anonymous: bool = False) -> HubError:
    code, message, detail = "UNKNOWN", f"{method} {path} failed with HTTP {response.status_code}", None
    try:
        errors = loads_json(response.content).get("errors") or []
        if errors:
            code = errors[0].get("code", code)
            message = errors[0].get("message") or message
            detail = errors[0].get("detail")
    except (ValueError, AttributeError, TypeError, KeyError):  # not our envelope: keep the HTTP status
        pass
    status = response.status_code
    cls: type[HubError] = HubError
    if code == "SIGNATURE_REQUIRED":
        cls = SignatureRequired
    elif status == 401:
        cls = Unauthorized
        message += LOGIN_HINT
    elif status == 403:
        cls = Forbidden
    elif status == 404:
        cls = NotFound
        if anonymous and method != "HEAD" and code in ("NAME_UNKNOWN", "MANIFEST_UNKNOWN", "BLOB_UNKNOWN"):
            message += PRIVATE_HINT
    elif status == 409 and code == "HAS_DEPENDENTS":
        cls = HasDependents
    elif status == 409 and code == "TAG_CONFLICT":
        cls = TagConflict
    elif code == "DIGEST_INVALID":
        cls = DigestInvalid
    return cls(message, code=code, status=status, detail=detail)
