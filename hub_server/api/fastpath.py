"""A raw ASGI answer to manifest ``GET``/``HEAD`` requests the read cache can serve whole.

Fleets poll manifests; with the read cache (``hub_server.registry.core.readcache``) such a request
touches neither the database nor the disk, and what is left of its cost is Litestar's routing,
signature parsing and dependency resolution (~40% of a worker's time, docs/benchmarks.md). This
wrapper sits inside the access log and the metrics middleware and in front of Litestar: for
``GET``/``HEAD /v2/{ns}/{repo}/manifests/{ref}`` without a query string it authenticates the
``Authorization`` header with the app's :class:`~hub_server.auth.credentials.Authenticator`
(the same token cache and TTL as every route), checks read access on the cached repository
facts with the rule every route applies (``registry/core/access.py``, :func:`authorize` for ``pull``),
and sends the cached bytes with the headers Litestar's handler would send (:func:`manifest_headers`; tests/hub_server/api/test_fastpath.py
compares both byte for byte). It labels the request with Litestar's route template and leaves
the principal in ``scope["state"]`` for the access log.

Anything else goes to Litestar unchanged: other routes and methods, a query string, a
repository or reference or manifest not in the cache (Litestar's handler then fills it), and
every refusal (a bad or revoked token, no access): those answers and their error envelopes are
built in one place only, the route.
"""

from __future__ import annotations

from typing import Any

from hub_server.auth.errors import AuthError
from hub_server.auth.scopes import Principal
from hub_server.db.outage import DatabaseUnavailable
from hub_server.errors import HubError
from hub_server.metrics import ASGIApp, Receive, Scope, Send
from hub_server.registry.core.access import authorize
from hub_server.registry.core.names import parse_reference
from hub_server.registry.core.readcache import CachedManifest, ReadCache

__all__ = ["MANIFEST_ROUTE", "ManifestFastPath", "manifest_headers"]

#: Litestar's ``scope["path_template"]`` for the manifest routes (the metrics and access-log label).
MANIFEST_ROUTE = "/v2/{ns}/{repo}/manifests/{ref}"


def manifest_headers(manifest: CachedManifest, *, head: bool) -> list[tuple[bytes, bytes]]:
    """The response headers of ``hub_server.api.manifests`` for ``manifest``, in Litestar's order.

    GET: ``Response(data, media_type=…, headers={"Docker-Content-Digest": …})`` gives the digest,
    then the content type (``; charset=utf-8`` added to ``text/*``), then the length. HEAD gives
    the digest and the length it was handed, then the content type.
    """
    digest = (b"docker-content-digest", manifest.digest.encode("latin-1"))
    length = (b"content-length", str(manifest.size).encode("latin-1"))
    media_type = manifest.media_type + ("; charset=utf-8" if manifest.media_type.startswith("text/") else "")
    content_type = (b"content-type", media_type.encode("latin-1"))
    return [digest, length, content_type] if head else [digest, content_type, length]


class ManifestFastPath:
    """The ASGI app: cached manifest answers here, everything else to ``inner`` (Litestar).

    ``served`` counts the answers sent here (tests and probes read it). ``state`` is the app's
    state (``authenticator`` and ``registry`` appear once its lifespan has started).
    """

    def __init__(self, inner: ASGIApp, state: Any) -> None:
        self.inner = inner
        self.state = state
        self.served = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = await self._cached(scope) if scope.get("type") == "http" else None
        if answer is None:
            await self.inner(scope, receive, send)
            return
        manifest, principal, head = answer
        scope["path_template"] = MANIFEST_ROUTE
        scope.setdefault("state", {})["principal"] = principal
        self.served += 1
        await send({"type": "http.response.start", "status": 200, "headers": manifest_headers(manifest, head=head)})
        await send({"type": "http.response.body", "body": b"" if head else manifest.data, "more_body": False})

    async def _cached(self, scope: Scope) -> tuple[CachedManifest, Principal, bool] | None:
        """The manifest, the caller and whether it is a HEAD, when the cache answers this request whole."""
        method = scope.get("method")
        path: str = scope.get("path", "")
        if method not in ("GET", "HEAD") or not path.startswith("/v2/") or scope.get("query_string"):
            return None
        parts = path[4:].split("/")
        if len(parts) != 4 or parts[2] != "manifests" or not all(parts):
            return None
        registry = getattr(self.state, "registry", None)
        authenticator = getattr(self.state, "authenticator", None)
        if registry is None or authenticator is None:
            return None
        cache: ReadCache = registry.ctx.cache
        ns, repo, _, ref = parts
        facts = cache.repository(ns, repo)
        if facts is None:
            return None
        authorization = [v for k, v in scope.get("headers", ()) if k == b"authorization"]
        if len(authorization) > 1:
            return None
        try:
            reference = parse_reference(ref)
            principal = await authenticator.principal(authorization[0].decode("latin-1") if authorization else None)
            authorize(principal, facts.full_name, facts, "pull")
        except (AuthError, HubError, DatabaseUnavailable):  # refused, malformed or an outage: the route answers it
            return None
        digest = (
            facts.tags.get(reference.tag)
            if reference.tag is not None
            else (reference.digest if reference.digest in facts.linked else None)
        )
        manifest = cache.manifest(digest) if digest is not None else None
        if manifest is None:
            return None
        return manifest, principal, method == "HEAD"
