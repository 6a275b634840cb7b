"""The mirror's read logic: what the routes call. Each read first asks ``AccessChecks`` (the upstream decides who
reads a repository), then answers from the cache or fetches from the upstream.

Manifests and blobs by digest: served from the cache when the object is there *and* the upstream confirmed the
digest in that repository (``links``; bytes are shared by digest, a repository's right to them is not). A cached
object not yet confirmed in the asked repository costs one ``HEAD`` upstream (a 4xx is relayed: a reader of A
never gets B's blob through ``/v2/A/…``). An uncached one is fetched once (single-flight), verified, stored.
Cached forever (until evicted by the size limit).

Tags (a manifest by tag): resolved upstream with one ``GET`` of the manifest (its digest verified against its
bytes), then kept ``tag_ttl`` seconds (``--mirror-tag-ttl``, default 60). The upstream unreachable: a stale tag
is still served, marked with ``Warning: 110 - "Response is Stale"`` (what Docker's pull-through cache does).

Documents (tags list, referrers, lineage, registry.json, the chain): relayed byte for byte and kept ``tag_ttl``
seconds, stale served (with the Warning) while the upstream is unreachable. The chain's JSON names each link's
repository and tags *as the caller may see them*, so it is kept per credential; the others are the same for every
reader of the repository. The chain's manifests are checked against their digests and cached as objects.

Errors: ``UpstreamRefusal`` (relayed 4xx), ``MirrorError`` (503 unreachable and nothing usable cached; 502 bytes
that do not match their digest; 400 a malformed digest).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from hub_server.errors import ErrorCode
from hub_server.mirror.access import AccessChecks, fingerprint
from hub_server.mirror.cache import ObjectCache, check_digest
from hub_server.mirror.errors import MirrorError, UpstreamRefusal, unreachable
from hub_server.mirror.index import CachedDoc, CachedObject, MirrorIndex
from hub_server.mirror.metrics import MirrorMetrics
from hub_server.mirror.upstream import Answer, Unreachable, Upstream

__all__ = ["STALE_WARNING", "Mirror", "Served"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

STALE_WARNING = '110 - "Response is Stale"'
OCTETS = "application/octet-stream"
PACK_TYPE = "application/zstd"
_MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "*/*",
    )
)


@dataclass(frozen=True)
class Served:
    """An object to answer with; ``stale``: its tag could not be re-resolved (the upstream is unreachable)."""

    obj: CachedObject
    stale: bool = False


class Mirror:
    def __init__(
        self,
        upstream: Upstream,
        cache: ObjectCache,
        access: AccessChecks,
        index: MirrorIndex,
        metrics: MirrorMetrics,
        *,
        tag_ttl: float,
    ) -> None:
        self.upstream = upstream
        self.cache = cache
        self.access = access
        self.index = index
        self.metrics = metrics
        self.tag_ttl = tag_ttl

    async def _shared(self, key: object, work: Callable[[], Awaitable[_T]]) -> _T:
        """``work`` once for every concurrent caller of ``key``. A caller that joined another's run and got the
        upstream's refusal asks again with its own credential: a refusal of someone else's is not its answer."""
        joined = self.cache.flights.running(key)
        try:
            return await self.cache.flights.run(key, work)
        except UpstreamRefusal:
            if not joined:
                raise
        return await self.cache.flights.run(key, work)

    # -- manifests -----------------------------------------------------------------------------------

    async def manifest(self, authorization: str | None, repository: str, ref: str) -> Served:
        await self.access.require(authorization, repository)
        if ref.startswith("sha256:") or ":" in ref:
            return Served(await self._by_digest(authorization, repository, check_digest(ref), "manifests"))
        known = await self.index.tag(repository, ref)
        if known is not None and time.time() - known[1] < self.tag_ttl:
            self.metrics.hits.labels(kind="tag").inc()
            return Served(await self._by_digest(authorization, repository, known[0], "manifests"))
        self.metrics.misses.labels(kind="tag").inc()
        try:
            digest = await self._shared(
                ("tag", repository, ref), lambda: self._resolve_tag(authorization, repository, ref)
            )
        except Unreachable as e:
            if known is None:
                raise unreachable(self.upstream.url, f"resolving {repository}:{ref}: {e}") from None
            obj = await self.cache.lookup(known[0])
            if obj is None:
                raise unreachable(self.upstream.url, f"resolving {repository}:{ref}: {e}") from None
            self.metrics.stale.inc()
            return Served(obj, stale=True)
        return Served(await self._by_digest(authorization, repository, digest, "manifests"))

    async def _resolve_tag(self, authorization: str | None, repository: str, tag: str) -> str:
        answer = await self.upstream.get(
            f"/v2/{repository}/manifests/{tag}", authorization, headers={"Accept": _MANIFEST_ACCEPT}
        )
        if not answer.ok:
            if answer.status == 404:
                await self.index.drop_tag(repository, tag)
            raise UpstreamRefusal(answer.status, answer.body, answer.relayed_headers())
        computed = "sha256:" + hashlib.sha256(answer.body).hexdigest()
        digest = answer.headers.get("docker-content-digest", computed)
        check_digest(digest)
        if await self.cache.lookup(digest) is None:
            self.metrics.fetches.labels(kind="manifest").inc()
            self.metrics.upstream_bytes.inc(len(answer.body))
            await self.cache.put(digest, _media_type(answer), answer.body)
        await self.index.link(repository, digest)
        await self.index.set_tag(repository, tag, digest, time.time())
        return digest

    # -- blobs ---------------------------------------------------------------------------------------

    async def blob(self, authorization: str | None, repository: str, digest: str) -> CachedObject:
        await self.access.require(authorization, repository)
        return await self._by_digest(authorization, repository, check_digest(digest), "blobs")

    async def _by_digest(self, authorization: str | None, repository: str, digest: str, kind: str) -> CachedObject:
        label = "blob" if kind == "blobs" else "manifest"
        path = f"/v2/{repository}/{kind}/{digest}"
        obj = await self.cache.lookup(digest)
        if obj is not None:
            if not await self.index.linked(repository, digest):
                await self._confirm(authorization, repository, path)
                await self.index.link(repository, digest)
            self.metrics.hits.labels(kind=label).inc()
            return obj
        self.metrics.misses.labels(kind=label).inc()
        try:
            obj = await self._shared(digest, lambda: self._fetch(authorization, path, digest, kind))
        except Unreachable as e:
            raise unreachable(self.upstream.url, f"fetching {digest}: {e}") from None
        if not await self.index.linked(repository, digest):  # another repository's request fetched it
            await self._confirm(authorization, repository, path)
            await self.index.link(repository, digest)
        return obj

    async def _confirm(self, authorization: str | None, repository: str, path: str) -> None:
        """The upstream holds this digest in ``repository`` (a HEAD); its refusal is relayed."""
        try:
            answer = await self.upstream.request("HEAD", path, authorization, headers={"Accept": _MANIFEST_ACCEPT})
        except Unreachable as e:
            raise unreachable(self.upstream.url, f"confirming {path}: {e}") from None
        if answer.ok:
            return
        try:  # a HEAD's refusal has no body: ask with GET for the envelope that says why, as the upstream words it
            async with self.upstream.stream(path, authorization) as (why, _chunks):
                if not why.ok:
                    answer = why
        except Unreachable:
            pass
        raise UpstreamRefusal(answer.status, answer.body, answer.relayed_headers())

    async def _fetch(self, authorization: str | None, path: str, digest: str, kind: str) -> CachedObject:
        repository = path.split("/")[2] + "/" + path.split("/")[3]
        if kind == "manifests":
            answer = await self.upstream.get(path, authorization, headers={"Accept": _MANIFEST_ACCEPT})
            if not answer.ok:
                raise UpstreamRefusal(answer.status, answer.body, answer.relayed_headers())
            self.metrics.fetches.labels(kind="manifest").inc()
            self.metrics.upstream_bytes.inc(len(answer.body))
            obj = await self.cache.put(digest, _media_type(answer), answer.body)
        else:
            async with self.upstream.stream(path, authorization) as (answer, chunks):
                if not answer.ok:
                    raise UpstreamRefusal(answer.status, answer.body, answer.relayed_headers())
                self.metrics.fetches.labels(kind="blob").inc()
                length = answer.headers.get("content-length")
                obj = await self.cache.fill(digest, OCTETS, _counted(chunks, self.metrics), _int(length))
            log.info("cached %s (%d bytes) from %s", digest, obj.size, self.upstream.url)
        await self.index.link(repository, digest)
        return obj

    # -- forkd packs ---------------------------------------------------------------------------------

    async def pack(self, authorization: str | None, repository: str, file: str) -> Served:
        """A forkd pack (``/packs/NS/REPO/FILE``), cached by its own sha256 (the hub's ``X-Checksum-Sha256``, checked
        over the bytes). ``@<digest>`` packs never change: kept forever; a tag's pack is asked again after the
        tag TTL, and served stale while the upstream is unreachable."""
        await self.access.require(authorization, repository)
        name = "pack:" + file
        known = await self.index.tag(repository, name)
        if known is not None and (file.startswith("@") or time.time() - known[1] < self.tag_ttl):
            obj = await self.cache.lookup(known[0])
            if obj is not None:
                self.metrics.hits.labels(kind="pack").inc()
                return Served(obj)
        self.metrics.misses.labels(kind="pack").inc()
        try:
            digest = await self._shared(
                ("pack", repository, file), lambda: self._fetch_pack(authorization, repository, file)
            )
        except Unreachable as e:
            obj = await self.cache.lookup(known[0]) if known is not None else None
            if obj is None:
                raise unreachable(self.upstream.url, f"fetching the pack {repository}/{file}: {e}") from None
            self.metrics.stale.inc()
            return Served(obj, stale=True)
        obj = await self.cache.lookup(digest)
        if obj is None:  # evicted in between: the next read fetches it again
            raise unreachable(self.upstream.url, f"the pack {repository}/{file} was evicted while it was served")
        return Served(obj)

    async def _fetch_pack(self, authorization: str | None, repository: str, file: str) -> str:
        async with self.upstream.stream(f"/packs/{repository}/{file}", authorization) as (answer, chunks):
            if not answer.ok:
                raise UpstreamRefusal(answer.status, answer.body, answer.relayed_headers())
            checksum = answer.headers.get("x-checksum-sha256") or answer.headers.get("hop-x-checksum-sha256")
            if not checksum:
                raise MirrorError(
                    ErrorCode.DIGEST_INVALID,
                    502,
                    f"the upstream sent the pack {repository}/{file} without its X-Checksum-Sha256: refused, "
                    "nothing cached",
                    {"path": f"/packs/{repository}/{file}"},
                )
            digest = "sha256:" + checksum.lower()
            if await self.cache.lookup(digest) is None:
                self.metrics.fetches.labels(kind="pack").inc()
                length = _int(answer.headers.get("content-length"))
                await self.cache.fill(digest, PACK_TYPE, _counted(chunks, self.metrics), length)
        await self.index.set_tag(repository, "pack:" + file, digest, time.time())
        return digest

    # -- documents -----------------------------------------------------------------------------------

    async def doc(
        self,
        authorization: str | None,
        repository: str | None,
        path: str,
        params: Mapping[str, str],
        *,
        per_credential: bool = False,
    ) -> tuple[CachedDoc, bool]:
        """A JSON answer of the upstream (see the module docstring) and whether it is stale."""
        if repository is not None:
            await self.access.require(authorization, repository)
        query = "&".join(f"{k}={v}" for k, v in sorted(params.items()))
        key = f"{path}?{query}"
        if per_credential:
            key = f"{fingerprint(authorization)} {key}"
        known = await self.index.doc(key)
        if known is not None and time.time() - known.fetched < self.tag_ttl:
            self.metrics.hits.labels(kind="doc").inc()
            return known, False
        self.metrics.misses.labels(kind="doc").inc()
        try:
            return await self._shared(("doc", key), lambda: self._fetch_doc(authorization, key, path, params)), False
        except Unreachable as e:
            if known is None:
                raise unreachable(self.upstream.url, f"fetching {path}: {e}") from None
            self.metrics.stale.inc()
            return known, True

    async def _fetch_doc(self, authorization: str | None, key: str, path: str, params: Mapping[str, str]) -> CachedDoc:
        answer = await self.upstream.get(path, authorization, params=params)
        if not answer.ok:
            if answer.status == 404:
                await self.index.drop_doc(key)
            raise UpstreamRefusal(answer.status, answer.body, answer.relayed_headers())
        if "/chain/" in path:
            await self._keep_chain_manifests(answer.body, path)
        headers = {k: v for k, v in answer.relayed_headers().items() if k != "www-authenticate"}
        doc = CachedDoc(answer.body, headers, time.time())
        await self.index.set_doc(key, doc)
        return doc

    async def _keep_chain_manifests(self, body: bytes, path: str) -> None:
        """Check every manifest of a chain against its digest (a mismatch is a 502, nothing kept), cache them."""
        try:
            links = json.loads(body)["chain"]
            items = [(str(x["digest"]), str(x["manifest"]).encode(), str(x.get("media_type", ""))) for x in links]
            where = [str(x.get("repository", "")) for x in links]
        except (ValueError, KeyError, TypeError) as e:
            raise MirrorError(
                ErrorCode.INTERNAL, 502, f"the upstream sent a malformed chain for {path}: {e}", {"path": path}
            ) from None
        for (digest, manifest, media_type), repository in zip(items, where, strict=True):
            if await self.cache.lookup(check_digest(digest)) is None:
                await self.cache.put(digest, media_type or "application/vnd.oci.image.manifest.v1+json", manifest)
            if repository:
                await self.index.link(repository, digest)


def _media_type(answer: Answer) -> str:
    return answer.headers.get("content-type", "application/vnd.oci.image.manifest.v1+json").split(";")[0].strip()


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


async def _counted(chunks, metrics: MirrorMetrics):  # type: ignore[no-untyped-def]
    async for piece in chunks:
        metrics.upstream_bytes.inc(len(piece))
        yield piece
