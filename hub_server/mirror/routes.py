"""The mirror's HTTP routes: the reads ``forkd pull`` and OCI clients make, answered by ``service.Mirror``.

    GET  /v2/                                   the upstream's answer (its challenge's realm rewritten to the mirror)
    GET|POST /v2/token                          relayed to the upstream (its tokens are what the upstream checks)
    GET|HEAD /v2/{ns}/{repo}/manifests/{ref}    exact bytes, Content-Type and Docker-Content-Digest
    GET|HEAD /v2/{ns}/{repo}/blobs/{digest}     whole, or by Range (one range, or multipart/byteranges)
    GET  /v2/{ns}/{repo}/tags/list              } documents: relayed, kept for the tag TTL
    GET  /v2/{ns}/{repo}/referrers/{digest}     }
    GET  /api/v1/repositories/{ns}/{repo}/chain/{ref}     (per credential)
    GET  /api/v1/repositories/{ns}/{repo}/lineage/{ref}
    GET  /registry.json                         its pack URLs rewritten to the mirror
    GET  /packs/{ns}/{repo}/{file}              forkd packs, cached by their sha256
    GET  /healthz, /metrics                     the mirror's own

A stale answer (the upstream unreachable) carries ``Warning: 110 - "Response is Stale"``. Writes are refused in
front of the routes (``app.refuse_writes``). Errors: what ``service`` raises, mapped by ``app``.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, get, head, post
from litestar.params import FromPath
from litestar.response import Stream

from hub_server.api.ranges import multipart_body, multipart_length, new_boundary, parse_range
from hub_server.mirror.cache import ObjectCache
from hub_server.mirror.errors import UpstreamRefusal, unreachable
from hub_server.mirror.index import CachedObject
from hub_server.mirror.service import OCTETS, STALE_WARNING, Mirror, Served
from hub_server.mirror.upstream import Unreachable
from hub_server.settings import Limits

__all__ = ["MIRROR_ROUTES", "mirror_base", "rewrite_realm"]

_MAX_RANGES = Limits().ranges_per_request
#: Seconds ``/healthz`` waits for the upstream (a probe must not hang on a black-holed upstream).
HEALTH_TIMEOUT = 2.0


def _mirror(request: Request[Any, Any, Any]) -> Mirror:
    mirror: Mirror = request.app.state.mirror
    return mirror


def _auth(request: Request[Any, Any, Any]) -> str | None:
    return request.headers.get("authorization")


def mirror_base(request: Request[Any, Any, Any]) -> str:
    public = request.app.state.settings.public_url
    return public or str(request.base_url).rstrip("/")


def rewrite_realm(headers: dict[str, str], request: Request[Any, Any, Any]) -> dict[str, str]:
    """The upstream's headers with its token realm pointed at the mirror, so OCI clients need only the mirror."""
    challenge = headers.get("www-authenticate")
    if challenge:
        upstream = _mirror(request).upstream.url
        headers = {
            **headers,
            "www-authenticate": challenge.replace(f'realm="{upstream}/', f'realm="{mirror_base(request)}/'),
        }
    return headers


def _manifest_headers(served: Served) -> dict[str, str]:
    headers = {"Docker-Content-Digest": served.obj.digest, "Content-Length": str(served.obj.size)}
    if served.stale:
        headers["Warning"] = STALE_WARNING
    return headers


def _blob_headers(obj: CachedObject) -> dict[str, str]:
    return {"Docker-Content-Digest": obj.digest, "ETag": f'"{obj.digest}"', "Accept-Ranges": "bytes"}


def _doc_response(body: bytes, headers: dict[str, str], stale: bool) -> Response[bytes]:
    out = {k: v for k, v in headers.items() if k != "content-type"}
    if stale:
        out["Warning"] = STALE_WARNING
    media_type = headers.get("content-type", "application/json")
    return Response(body, media_type=media_type, headers=out)


class MirrorReads(Controller):
    """Reads of one repository's content."""

    path = "/v2/{ns:str}/{repo:str}"

    @get("/manifests/{ref:str}")
    async def manifest(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str], ref: FromPath[str]
    ) -> Response[bytes]:
        mirror = _mirror(request)
        served = await mirror.manifest(_auth(request), f"{ns}/{repo}", ref)
        body = await mirror.cache.read(served.obj)
        return Response(body, media_type=served.obj.media_type, headers=_manifest_headers(served))

    @head("/manifests/{ref:str}", media_type=OCTETS)
    async def manifest_head(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str], ref: FromPath[str]
    ) -> Response[None]:
        served = await _mirror(request).manifest(_auth(request), f"{ns}/{repo}", ref)
        return Response(None, media_type=served.obj.media_type, headers=_manifest_headers(served))

    @get("/blobs/{digest:str}")
    async def blob(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str], digest: FromPath[str]
    ) -> Stream:
        mirror = _mirror(request)
        obj = await mirror.blob(_auth(request), f"{ns}/{repo}", digest)
        return _blob_stream(mirror.cache, obj, request.headers.get("range"))

    @head("/blobs/{digest:str}", media_type=OCTETS)
    async def blob_head(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str], digest: FromPath[str]
    ) -> Response[None]:
        obj = await _mirror(request).blob(_auth(request), f"{ns}/{repo}", digest)
        return Response(None, media_type=OCTETS, headers={**_blob_headers(obj), "Content-Length": str(obj.size)})

    @get("/tags/list")
    async def tags_list(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str]
    ) -> Response[bytes]:
        return await _doc(request, f"{ns}/{repo}")

    @get("/referrers/{digest:str}")
    async def referrers(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str], digest: FromPath[str]
    ) -> Response[bytes]:
        return await _doc(request, f"{ns}/{repo}")


def _blob_stream(cache: ObjectCache, obj: CachedObject, range_header: str | None) -> Stream:
    headers = _blob_headers(obj)
    if range_header is None:
        headers["Content-Length"] = str(obj.size)
        return Stream(cache.open(obj), media_type=OCTETS, headers=headers)
    ranges = parse_range(range_header, obj.size, _MAX_RANGES)
    if len(ranges) == 1:
        first, last = ranges[0]
        headers["Content-Range"] = f"bytes {first}-{last}/{obj.size}"
        headers["Content-Length"] = str(last - first + 1)
        return Stream(cache.open(obj, first, last - first + 1), status_code=206, media_type=OCTETS, headers=headers)
    boundary = new_boundary()
    headers["Content-Length"] = str(multipart_length(boundary, OCTETS, ranges, obj.size))
    return Stream(
        multipart_body(boundary, OCTETS, ranges, obj.size, lambda offset, length: cache.open(obj, offset, length)),
        status_code=206,
        media_type=f"multipart/byteranges; boundary={boundary}",
        headers=headers,
    )


async def _doc(
    request: Request[Any, Any, Any], repository: str | None, *, per_credential: bool = False
) -> Response[bytes]:
    doc, stale = await _mirror(request).doc(
        _auth(request), repository, request.url.path, dict(request.query_params), per_credential=per_credential
    )
    return _doc_response(doc.body, doc.headers, stale)


class MirrorApi(Controller):
    path = "/api/v1/repositories/{ns:str}/{repo:str}"

    @get("/chain/{ref:str}")
    async def chain(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str], ref: FromPath[str]
    ) -> Response[bytes]:
        return await _doc(request, f"{ns}/{repo}", per_credential=True)  # links' repositories are the caller's view

    @get("/lineage/{ref:str}")
    async def lineage(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str], ref: FromPath[str]
    ) -> Response[bytes]:
        return await _doc(request, f"{ns}/{repo}", per_credential=True)


class MirrorSystem(Controller):
    @get("/registry.json")
    async def registry_json(self, request: Request[Any, Any, Any]) -> Response[bytes]:
        """forkd's registry, its pack URLs pointed at the mirror (``/packs/…`` below)."""
        doc, stale = await _mirror(request).doc(_auth(request), None, request.url.path, dict(request.query_params))
        upstream = f'"{_mirror(request).upstream.url}/packs/'.encode()
        body = doc.body.replace(upstream, f'"{mirror_base(request)}/packs/'.encode())
        return _doc_response(body, doc.headers, stale)

    @get("/packs/{ns:str}/{repo:str}/{file:str}")
    async def pack(
        self, request: Request[Any, Any, Any], ns: FromPath[str], repo: FromPath[str], file: FromPath[str]
    ) -> Stream:
        mirror = _mirror(request)
        served = await mirror.pack(_auth(request), f"{ns}/{repo}", file)
        hexdigest = served.obj.digest.removeprefix("sha256:")
        headers = {
            "ETag": f'"{served.obj.digest}"',
            "X-Checksum-Sha256": hexdigest,
            "Content-Length": str(served.obj.size),
        }
        if served.stale:
            headers["Warning"] = STALE_WARNING
        return Stream(mirror.cache.open(served.obj), media_type=served.obj.media_type, headers=headers)

    @get("/v2")
    async def v2_root(self, request: Request[Any, Any, Any]) -> Response[bytes]:
        mirror = _mirror(request)
        try:
            answer = await mirror.upstream.get("/v2/", _auth(request))
        except Unreachable:
            # Cached content stays readable: answer as the hub does (a challenge without credentials).
            if _auth(request) is None:
                realm = f'Bearer realm="{mirror_base(request)}/v2/token",service="forkd-hub"'
                return Response(
                    b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":{}}]}',
                    status_code=401,
                    media_type="application/json",
                    headers={"WWW-Authenticate": realm},
                )
            return Response(
                b"{}", media_type="application/json", headers={"Docker-Distribution-Api-Version": "registry/2.0"}
            )
        return _relay(request, answer.status, answer.body, answer.relayed_headers())

    @get("/v2/token")
    async def token(self, request: Request[Any, Any, Any]) -> Response[bytes]:
        return await _relay_token(request, "GET", None)

    @post("/v2/token")
    async def token_oauth2(self, request: Request[Any, Any, Any]) -> Response[bytes]:
        return await _relay_token(request, "POST", await request.body())

    @get("/healthz")
    async def healthz(self, request: Request[Any, Any, Any]) -> Response[dict[str, str]]:
        mirror = _mirror(request)
        try:
            await mirror.cache.store.exists("mirror/healthz")
            storage = "ok"
        except Exception as e:  # noqa: BLE001 - any store failure is "unavailable", said in one line
            storage = f"unavailable: {type(e).__name__}"
        try:
            await mirror.upstream.request("GET", "/v2/", None, wait=HEALTH_TIMEOUT)
            upstream = "ok"
        except Unreachable as e:
            upstream = f"unreachable: {e}"
        ok = storage == "ok"  # a mirror whose upstream is down still serves its cache
        body = {
            "status": "ok" if ok else "unavailable",
            "storage": storage,
            "upstream": upstream,
            "mirror_of": mirror.upstream.url,
        }
        return Response(body, status_code=200 if ok else 503)

    @get("/metrics", media_type="text/plain")
    async def metrics(self, request: Request[Any, Any, Any]) -> Response[bytes]:
        data, content_type = _mirror(request).metrics.render()
        return Response(data, media_type=content_type.split("; charset=")[0])


async def _relay_token(request: Request[Any, Any, Any], method: str, body: bytes | None) -> Response[bytes]:
    mirror = _mirror(request)
    headers = (
        {"Content-Type": request.headers["content-type"]}
        if body is not None and "content-type" in request.headers
        else None
    )
    try:
        answer = await mirror.upstream.request(
            method,
            "/v2/token",
            _auth(request),
            params=tuple(request.query_params.multi_items()),
            content=body,
            headers=headers,
        )
    except Unreachable as e:
        raise unreachable(mirror.upstream.url, f"asking for a token: {e}") from None
    return _relay(request, answer.status, answer.body, answer.relayed_headers())


def _relay(request: Request[Any, Any, Any], status: int, body: bytes, headers: dict[str, str]) -> Response[bytes]:
    headers = rewrite_realm(headers, request)
    media_type = headers.pop("content-type", "application/json")
    return Response(body, status_code=status, media_type=media_type, headers=headers)


def relay_refusal(request: Request[Any, Any, Any], exc: UpstreamRefusal) -> Response[bytes]:
    """The upstream's refusal, as it gave it (a HEAD gets no body)."""
    return _relay(request, exc.status, exc.body, dict(exc.headers))


MIRROR_ROUTES = [MirrorReads, MirrorApi, MirrorSystem]
