"""RepositoryClient: the hub calls about one repository, from ``HubClient.repository(name)``.

distribution's ``Repository`` shape on the client side: its catalog entry, manifests and tags,
referrers, chains, blobs (whole, or by ranges with presigned or planned store reads) and uploads,
without repeating the name in every call. Every request goes through the :class:`~.client.HubClient`
it came from (token, bounds on answers, typed errors, byte counts, the presigned-URL cache).

Errors: :mod:`forkd_client.hub.errors` (the hub's refusals parsed from its envelope, DigestInvalid
for bytes that do not match their digest, HubError for a malformed answer, HubUnreachable).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from manifest.digest import digest_bytes
from manifest.mediatypes import BLOB_PLAN
from manifest.model import MAX_MANIFEST_BYTES

from .errors import DigestInvalid, HubError, NotFound
from .presigned import parse_plan, read_plan
from .wire import (
    REDIRECTS,
    json_object,
    recipe_path,
    redirect_target,
    slicer,
    split_ranges,
    verify_digest,
)

if TYPE_CHECKING:
    from .client import HubClient

__all__ = ["ANYWHERE", "MANIFEST_TYPE", "MAX_REFERRER_PAGES", "ChainLink", "RepositoryClient"]

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
QUERY_BATCH = 10_000
#: Referrers pages followed per list (a hub sends at most FORKD_HUB_REFERRERS_PER_SUBJECT referrers of one
#: subject, 100 a page by default: 128 in two pages; this bounds what a misbehaving hub can make us read).
MAX_REFERRER_PAGES = 64
#: largest answer read for anything but blob ranges: a chunk map may be 64 MiB
MAX_RESPONSE_BYTES = 80 << 20
MAX_RANGES_PER_REQUEST = 256
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


class RepositoryClient:
    """The calls about repository ``name`` (``ns/repo``) of the hub ``hub`` talks to."""

    def __init__(self, hub: HubClient, name: str) -> None:
        self.hub = hub
        self.name = name

    def __repr__(self) -> str:
        return f"RepositoryClient({self.hub.base_url!r}, {self.name!r})"

    # -- the repository ---------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """The repository's catalog entry (visibility, description, tags)."""
        return json_object(self.hub._request("GET", f"/api/v1/repositories/{self.name}"), f"repository {self.name}")

    def update(
        self, *, public: bool | None = None, description: str | None = None, readme: str | None = None
    ) -> dict[str, Any]:
        """Change the repository's visibility, description or README (push or admin there); answers like
        :meth:`info`. Raises the HubError family (Forbidden without push; HubError ``INVALID_REQUEST`` for a
        description or README over the hub's limit)."""
        body = {
            k: v for k, v in (("public", public), ("description", description), ("readme", readme)) if v is not None
        }
        return json_object(
            self.hub._request("PATCH", f"/api/v1/repositories/{self.name}", json=body), f"repository {self.name}"
        )

    def lineage(self, ref: str) -> dict[str, Any]:
        return json_object(
            self.hub._request("GET", f"/api/v1/repositories/{self.name}/lineage/{ref}"), f"lineage of {self.name}:{ref}"
        )

    def delete(self, ref: str, *, cascade: bool = False, force: bool = False) -> dict[str, Any]:
        params = {k: "true" for k, v in (("cascade", cascade), ("force", force)) if v}
        response = self.hub._request("DELETE", f"/v2/{self.name}/manifests/{ref}", params=params, ok=(200, 202, 204))
        return json_object(response, f"delete {self.name}:{ref}") if response.content else {}

    # -- manifests ------------------------------------------------------------------------------

    def manifest_exists(self, ref: str) -> bool:
        try:
            self.hub._request("HEAD", f"/v2/{self.name}/manifests/{ref}", headers={"Accept": MANIFEST_TYPE})
        except NotFound:
            return False
        return True

    def get_manifest(self, ref: str) -> tuple[bytes, str]:
        """The exact manifest bytes and their digest (verified when ``ref`` is a digest)."""
        r = self.hub._request(
            "GET", f"/v2/{self.name}/manifests/{ref}", headers={"Accept": MANIFEST_TYPE}, max_bytes=MAX_MANIFEST_BYTES
        )
        data = r.content
        if ref.count(":") == 1 and len(ref) > 70:
            verify_digest(data, ref, f"manifest {self.name}@{ref}")
            return data, ref
        digest = r.headers.get("docker-content-digest") or str(digest_bytes(data))
        verify_digest(data, digest, f"manifest {self.name}:{ref}")
        return data, digest

    def put_manifest(
        self,
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
        # retried through outages: the same bytes make the same manifest, and the hub accepts a tag already
        # where this PUT moves it (a retry whose first attempt committed before its answer was lost)
        r = self.hub._request(
            "PUT",
            f"/v2/{self.name}/manifests/{ref}",
            content=data,
            params=params,
            headers=headers,
            ok=(201,),
            retry=True,
        )
        return r.headers.get("docker-content-digest", str(digest_bytes(data)))

    def tag_digest(self, tag: str) -> str | None:
        """The digest ``tag`` points at, or None if there is no such tag (or repository)."""
        try:
            r = self.hub._request("HEAD", f"/v2/{self.name}/manifests/{tag}")
        except NotFound:
            return None
        return r.headers.get("docker-content-digest")

    def referrers(self, digest: str, artifact_type: str | None = None) -> list[dict[str, Any]]:
        """Descriptors of the manifests in this repository whose subject is ``digest`` (OCI referrers API),
        only those of ``artifact_type`` when given: every page the hub links (``Link: rel="next"``, on this
        hub only), at most :data:`MAX_REFERRER_PAGES`. Raises HubError on a malformed answer."""
        path: str = f"/v2/{self.name}/referrers/{digest}"
        params: dict[str, str] | None = {"artifactType": artifact_type} if artifact_type else {}
        found: list[dict[str, Any]] = []
        for _ in range(MAX_REFERRER_PAGES):
            r = self.hub._request("GET", path, params=params)
            page = json_object(r, f"referrers of {self.name}@{digest}").get("manifests", [])
            if not isinstance(page, list) or not all(isinstance(d, dict) for d in page):
                raise HubError(f"hub sent a malformed referrers index for {self.name}@{digest}")
            found.extend(page)
            following = r.links.get("next", {}).get("url")
            if not following or not following.startswith(f"/v2/{self.name}/referrers/"):
                break
            path, params = following, None  # the link carries the query
        return found

    def get_chain(self, ref: str) -> list[ChainLink]:
        """The chain base → head, each manifest's bytes verified against its digest."""
        r = self.hub._request("GET", f"/api/v1/repositories/{self.name}/chain/{ref}")
        links = []
        try:
            for item in json_object(r, f"chain of {self.name}:{ref}").get("chain", []):
                manifest = item["manifest"].encode()
                verify_digest(manifest, item["digest"], f"manifest {item['digest']}")
                links.append(
                    ChainLink(
                        item["digest"],
                        manifest,
                        item["config"].encode(),
                        item.get("repository", self.name),
                        tuple(item.get("tags", [])),
                    )
                )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise HubError(f"hub sent a malformed chain for {self.name}:{ref}: {type(e).__name__}: {e}") from None
        if not links:
            raise HubError(f"hub returned an empty chain for {self.name}:{ref}")
        return links

    # -- blobs ----------------------------------------------------------------------------------

    def blob_exists(self, digest: str) -> bool:
        try:
            self.hub._request("HEAD", f"/v2/{self.name}/blobs/{digest}")
        except NotFound:
            return False
        return True

    def blob_size(self, digest: str) -> int:
        """Size of a blob in the repository (HEAD). Raises NotFound."""
        r = self.hub._request("HEAD", f"/v2/{self.name}/blobs/{digest}")
        return int(r.headers.get("content-length", "0"))

    def get_blob(self, digest: str, size: int | None = None, *, limit: int = MAX_RESPONSE_BYTES) -> bytes:
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
        data = self.hub._request("GET", f"/v2/{self.name}/blobs/{digest}", max_bytes=bound).content
        if size is not None and len(data) != size:
            raise DigestInvalid(
                f"blob {digest}: the hub sent {len(data)} bytes, its descriptor says {size}", code="DIGEST_INVALID"
            )
        verify_digest(data, digest, f"blob {digest}")
        return data

    def read_ranges(self, digest: str, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """Bytes of several ``(offset, length)`` ranges of one blob, in the order given, as views
        into the response bodies (no copies).

        Sends at most MAX_RANGES_PER_REQUEST ranges per request; the caller verifies content
        (each range holds whole chunk frames whose digests it knows).
        """
        out: list[memoryview] = []
        for start in range(0, len(ranges), MAX_RANGES_PER_REQUEST):
            batch = ranges[start : start + MAX_RANGES_PER_REQUEST]
            out.extend(self.open_ranges(digest, batch)(batch))
        return out

    def open_ranges(
        self, digest: str, batch: Sequence[tuple[int, int]]
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
        target = self.hub._presigned.get(self.name, digest)
        if target is not None:
            return self._cached_reader(digest, target)
        r = self.hub._request(
            "GET",
            f"/v2/{self.name}/blobs/{digest}",
            headers={"Range": f"bytes={spec}", "Accept": ACCEPT_RANGES},
            ok=(200, 206, *REDIRECTS),
            follow=False,
            max_bytes=bound + plan_room,
        )
        if r.status_code == 200 and r.headers.get("content-type", "").startswith(BLOB_PLAN):
            plan = parse_plan(json_object(r, f"the fetch plan of blob {digest}"), digest, batch)
            return lambda pieces: read_plan(
                plan,
                pieces,
                STORE_RANGE_GAP,
                STORE_SPAN_BYTES,
                lambda url, start, end: self.hub.store_range(url, start, end, digest),
                STORE_PARALLEL,
            )
        if len(r.content) > bound:  # bytes, not a plan: held to what the ranges need
            raise HubError(f"GET blob {digest}: the hub sent more than the {bound:,} bytes this request can need")
        target = redirect_target(r)
        if target is None:
            return slicer(batch, split_ranges(r, batch, digest), digest)
        self.hub._presigned.remember(self.name, digest, target)
        return lambda pieces: self.hub.store_ranges(target, pieces, digest)

    def _cached_reader(self, digest: str, target: str) -> Callable[[Sequence[tuple[int, int]]], list[memoryview]]:
        """A reader from a remembered presigned URL; when the store refuses it (expired), the hub is asked again."""

        def read(pieces: Sequence[tuple[int, int]]) -> list[memoryview]:
            try:
                return self.hub.store_ranges(target, pieces, digest)
            except HubError:
                self.hub._presigned.forget(self.name, digest)
                return self.open_ranges(digest, pieces)(pieces)

        return read

    def start_upload(self) -> str:
        r = self.hub._request("POST", f"/v2/{self.name}/blobs/uploads/", ok=(202,), retry=True)
        if "location" not in r.headers:
            raise HubError(f"hub started an upload to {self.name} without a Location header")
        return r.headers["location"]

    def mount_or_start(self, digest: str) -> str | None:
        """Link blob ``digest`` from any repository of this hub the token may read (a cross-repository
        mount: no bytes sent, nothing re-verified) and return None; where no readable repository holds it,
        the hub opens an upload session instead: return its location."""
        r = self.hub._request(
            "POST", f"/v2/{self.name}/blobs/uploads/", params={"mount": digest}, ok=(201, 202), retry=True
        )
        if r.status_code == 201:
            return None
        if "location" not in r.headers:
            raise HubError(f"hub started an upload to {self.name} without a Location header")
        return r.headers["location"]

    def query_frames(self, digests: Sequence[str]) -> set[str]:
        """Which zstd frames (by the blake3 of their bytes) the hub holds in blobs this caller may
        read, in batches of QUERY_BATCH."""
        found: set[str] = set()
        for start in range(0, len(digests), QUERY_BATCH):
            body = {"digests": list(digests[start : start + QUERY_BATCH])}
            r = self.hub._request("POST", f"/api/v1/repositories/{self.name}/frames/query", json=body, retry=True)
            try:
                for digest, frame in json_object(r, f"frames/query answer for {self.name}").get("found", {}).items():
                    if int(frame["length"]) <= 0:
                        raise ValueError(f"frame {digest} has no length")
                    found.add(str(digest))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise HubError(
                    f"hub sent a malformed frames/query answer for {self.name}: {type(e).__name__}: {e}"
                ) from None
        return found & set(digests)

    def peers(self, layers: Sequence[str], host: str | None = None) -> dict[str, list[tuple[str, str]]]:
        """Which fleet peers hold each of ``layers`` whole: layer → [(host, url)] (``POST …/peers``; the
        asking ``host`` left out). Raises HubError (a malformed answer too)."""
        return self.ask_peers(layers, host)[0]

    def ask_peers(
        self, layers: Sequence[str], host: str | None = None, *, pulling: bool = False, window: float | None = None
    ) -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[tuple[str, str]]]]:
        """The peers holding each of ``layers`` whole and, asking as ``host`` ``pulling`` them now, each layer's
        swarm (the hosts pulling it, sorted by name, this one included): two maps layer → [(host, url)]. The hub
        may hold a pulling ask for its cohort window (at most ``window`` seconds). Raises HubError."""
        body: dict[str, Any] = {"layers": list(layers)}
        if host:
            body["host"] = host
            if pulling:
                body["pulling"] = True
                if window is not None:
                    body["window"] = window
        r = self.hub._request("POST", f"/api/v1/repositories/{self.name}/peers", json=body, retry=True)
        try:
            answer = json_object(r, f"peers answer for {self.name}")

            def by_layer(found: Any) -> dict[str, list[tuple[str, str]]]:
                return {
                    str(layer): [(str(p["host"]), str(p["url"])) for p in members]
                    for layer, members in (found or {}).items()
                    if layer in body["layers"]
                }

            return by_layer(answer.get("peers")), by_layer(answer.get("swarm"))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise HubError(f"hub sent a malformed peers answer for {self.name}: {type(e).__name__}: {e}") from None

    def declare_recipe(self, location: str, recipe: dict) -> bool:
        """Declare a data blob's recipe on its (still empty) upload session, so the hub verifies each
        frame as it arrives; False from a hub that predates this (it verifies at the finish)."""
        r = self.hub._request("PUT", recipe_path(self.name, location), json=recipe, ok=(202, 405))
        return r.status_code == 202

    def finish_recipe(self, location: str, recipe: dict) -> None:
        """Finish an upload session holding a data blob's new frames with the blob's recipe."""
        self.hub._request("POST", recipe_path(self.name, location), json=recipe, ok=(201,))
