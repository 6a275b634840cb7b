"""The stages of ``forkd pull`` that need no pull state: the result types, parsing and checking the
chain the hub answered, naming the local tags, and the per-link checks around a fill
(disk space, the resume marker, indexing installed chunks), and the records of a link in
flight (:class:`FetchedLink`, :class:`ParentLink`). :class:`.pull.ChainPull` runs them.

Errors: forkd_client.hub.errors (DigestInvalid, DiskFull, HubError), DeclarationTooLarge (.limits), OSError.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from manifest import mediatypes as mt
from manifest.assemble import FileAssembler
from manifest.chunktree import ChunkList
from manifest.digest import digest_bytes
from manifest.errors import ManifestError
from manifest.jsontext import loads as loads_json
from manifest.model import ChunkMap, LayerConfig, LayerManifest

from ..diskspace import mount_point, no_space_message
from ..errors import SnapshotNotFound
from ..snapdir import LocalSnapshot
from ..store import SnapshotStore
from .errors import DigestInvalid, DiskFull, HubError
from .limits import ClientLimits, check_files
from .localchunks import LocalChunkIndex
from .reference import Reference
from .repository import ChainLink, RepositoryClient
from .signing import Verified

RESUME_MARKER = ".resume.json"
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")

ParsedLink = tuple[ChainLink, LayerManifest, LayerConfig]


@dataclass
class LinkPulled:
    tag: str
    digest: str
    reused: bool
    chunks_fetched: int = 0
    chunks_local: int = 0  # read from local snapshots holding the same content
    chunks_resumed: int = 0  # kept from the staged files of an interrupted pull
    bytes_fetched: int = 0
    chunks_peers: int = 0  # from fleet peers (a pull with peers), each verified
    bytes_by_source: dict[str, int] = field(default_factory=dict)  # chunk bytes: hub, peers, local, resumed


@dataclass
class PullResult:
    reference: str
    digest: str
    tag: str
    links: list[LinkPulled] = field(default_factory=list)
    bytes_received: int = 0
    signed_by: Verified | None = None
    mirror: str | None = None
    """The mirror that served the pull's reads (the last one, if one was skipped); ``None``: the hub itself."""
    bytes_by_peer: dict[str, int] = field(default_factory=dict)  # a pull with peers: chunk bytes per peer URL
    peers_dropped: dict[str, str] = field(default_factory=dict)  # peer URL → why it was dropped
    swarm_size: int = 0  # a pull with peers: the largest swarm (hosts pulling a link at once) it split chunks over

    @property
    def bytes_by_source(self) -> dict[str, int]:
        """The chunk bytes (uncompressed) written from each source over every link."""
        total = {"hub": 0, "peers": 0, "local": 0, "resumed": 0}
        for link in self.links:
            for source, n in link.bytes_by_source.items():
                total[source] = total.get(source, 0) + n
        return total

    @property
    def up_to_date(self) -> bool:
        return all(link.reused for link in self.links)

    def to_obj(self) -> dict:
        out = {
            "reference": self.reference,
            "digest": self.digest,
            "tag": self.tag,
            "up_to_date": self.up_to_date,
            "bytes_received": self.bytes_received,
            "bytes_by_source": self.bytes_by_source,
            "bytes_by_peer": dict(self.bytes_by_peer),
            "peers_dropped": dict(self.peers_dropped),
            "swarm_size": self.swarm_size,
            "links": [{**vars(link), "bytes_by_source": dict(link.bytes_by_source)} for link in self.links],
            "mirror": self.mirror,
        }
        if self.signed_by is not None:
            out["signature"] = self.signed_by.to_obj()
        return out


def local_tag_for(name: str) -> str:
    """A local tag from a hub name or tag: forkd's tag rules, at most 64 characters."""
    tag = _SAFE.sub("-", name).strip("-") or "snapshot"
    return tag[:64]


def parse_link(link: ChainLink, limits: ClientLimits | None = None) -> ParsedLink:
    """A link's manifest and config, the config checked against the digest the manifest names and
    its chunked files' declared sizes against the client's limits (:mod:`.limits`), before anything
    is fetched or allocated for them. Raises DigestInvalid, DeclarationTooLarge, HubError."""
    try:
        manifest = LayerManifest.from_json(link.manifest)
        if str(digest_bytes(link.config, manifest.config.digest.split(":")[0])) != manifest.config.digest:
            raise DigestInvalid(f"layer {link.digest}: config does not match its digest {manifest.config.digest}")
        config = LayerConfig.from_json(link.config)
    except ManifestError as e:
        raise HubError(f"layer {link.digest} is not a valid forkd snapshot layer: {e}") from None
    check_files(link.digest, config, limits)
    return link, manifest, config


def check_chain(repo: RepositoryClient, ref: Reference, parsed: list[ParsedLink]) -> None:
    """The hub's chain must be one: each config names the link below it as its parent, the base
    none, and a pinned digest must be the head (or a chain index listing exactly these links).
    Then every installed byte hangs off the head's digest. Raises DigestInvalid."""
    for i, (link, _, config) in enumerate(parsed):
        below = parsed[i - 1][0].digest if i else None
        named = config.parent.digest if config.parent else None
        if named != below:
            raise DigestInvalid(
                f"layer {link.digest}: its config names parent {named}, but the hub's chain puts {below} below it"
            )
    digests = [link.digest for link, _, _ in parsed]
    if ref.digest and digests[-1] != ref.digest:
        data, _ = repo.get_manifest(ref.digest)  # verified against the pinned digest
        try:
            listed = [m["digest"] for m in loads_json(data)["manifests"]]
        except (ValueError, KeyError, TypeError):
            listed = None
        if listed != digests:
            raise DigestInvalid(
                f"{ref}: the hub answered with the chain of {digests[-1]}, which {ref.digest} does not name"
            )


def repository_of(link: ChainLink, ref: Reference) -> str:
    if link.repository == ref.name:
        return ref.name
    try:
        other = Reference.parse(link.repository)
    except HubError:
        raise HubError(f"the hub names an invalid repository {link.repository!r} for layer {link.digest}") from None
    return other.name


def installed_from(store: SnapshotStore, tag: str, digest: str) -> LocalSnapshot | None:
    try:
        snap = store.get(tag)
    except SnapshotNotFound:
        return None
    return snap if (snap.origin or {}).get("manifest_digest") == digest else None


def local_tags(store: SnapshotStore, parsed: list[ParsedLink], head_tag: str) -> list[str]:
    """Local tags base → head: the head gets ``head_tag``; a parent gets the tag its child's config
    names, or that tag plus a digest suffix when a different snapshot already uses it."""
    tags = [head_tag]
    for i in range(len(parsed) - 1, 0, -1):
        child_config = parsed[i][2]
        parent_digest = parsed[i - 1][0].digest
        wanted = local_tag_for(child_config.parent.tag if child_config.parent and child_config.parent.tag else "layer")
        if (store.exists(wanted) and installed_from(store, wanted, parent_digest) is None) or wanted in tags:
            wanted = local_tag_for(f"{wanted[:50]}-{parent_digest.split(':')[1][:12]}")
        tags.append(wanted)
    return list(reversed(tags))


def check_space(store: SnapshotStore, maps: dict[str, ChunkMap], parent: Path | None, layer: str) -> None:
    """Refuse up front when the link cannot fit: its changed chunks (zeroed ones included), plus a full copy of the
    parent's allocated bytes where the filesystem cannot reflink (counted pessimistically)."""
    # zero chunks count too: in a link they are written as real zeros (forkd reads holes as the parent's bytes)
    need = sum(min(m.chunk_size, m.size - e.index * m.chunk_size) for m in maps.values() for e in m.entries)
    if parent is not None:
        need += sum((parent / role).stat().st_blocks * 512 for role in maps if (parent / role).is_file())
    st = os.statvfs(store.root)
    free = st.f_bavail * st.f_frsize
    if need > free:
        free_some = no_space_message(None, store.root).split(": ", 1)[1]  # "free space there: ..."
        raise DiskFull(
            f"no space left on {mount_point(store.root)} for layer {layer}: it may need "
            f"{need / 2**20:,.0f} MiB (changed chunks, plus a copy of the parent where the filesystem "
            f"cannot reflink), {free / 2**20:,.0f} MiB free; {free_some}"
        )


def map_chunks(chunk_map: ChunkMap) -> Iterator[tuple[str, int, int]]:
    """``(digest, offset, length)`` of each data chunk a chunk map places in its file (zero chunks left out)."""
    cs = chunk_map.chunk_size
    for e in chunk_map.entries:
        if e.digest is not None:
            yield e.digest, e.index * cs, min(cs, chunk_map.size - e.index * cs)


def index_installed(store: SnapshotStore, index: LocalChunkIndex, tag: str, maps: dict[str, ChunkMap]) -> None:
    """The link's chunks now live in its installed files: index them there, so later pulls
    (of other chains sharing them) read them locally."""
    for role, chunk_map in maps.items():
        index.add(store.path(tag) / role, map_chunks(chunk_map))


def marker_layer(marker: Path) -> str | None:
    """The layer an interrupted pull's staged files were set up for, if the marker is sound."""
    try:
        return json.loads(marker.read_bytes()).get("layer")
    except (OSError, ValueError, AttributeError):
        return None


def parent_sha256(store: SnapshotStore, parent_tag: str, parent_config: LayerConfig, memory: Path) -> str:
    """Lowercase hex sha256 of the parent's memory.bin for forkd's ``parent_content_hash``."""
    known = store.verified.cached(memory).get("sha256")
    if known is not None:
        return known.split(":", 1)[1]
    stated = parent_config.files.get(mt.MEMORY_FILE)
    if stated is not None and stated.sha256:
        return stated.sha256.split(":", 1)[1]
    return store.memory_sha256(parent_tag)


def when_all_ready(count: int, then: Callable[[], object]) -> Callable[[], None]:
    """A callback to call ``count`` times, from any threads: the last call runs ``then`` (at once
    when ``count`` is 0). For the resume marker, written once every staged file is set up."""
    left, lock = [count], threading.Lock()
    if count == 0:
        then()

    def one() -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                then()

    return one


def raise_failed_check(waiting: list[FetchedLink]) -> None:
    """Deferred installs: re-raise the first failed check of the waiting links (their staged files
    are then not resumed), so it is reported rather than what it caused downstream."""
    for fetched in waiting:
        error = fetched.verification.exception()
        if error is not None:
            for later in waiting:
                (later.staged / RESUME_MARKER).unlink(missing_ok=True)
            raise error


@dataclass
class FetchedLink:
    """A link whose changed chunks are written into its staged files, waiting for the
    verifier thread's whole-file check (``verification``: {role: digests}) and its install."""

    tag: str
    name: str
    link: ChainLink
    config: LayerConfig
    maps: dict[str, ChunkMap]
    stats: LinkPulled
    staged: Path
    parent: ParentLink | None
    verification: Future
    lists: dict[str, ChunkList] = field(default_factory=dict)
    assemblers: dict[str, FileAssembler] = field(default_factory=dict)
    installed: bool = False
    origin_extra: dict[str, str] = field(default_factory=dict)


@dataclass
class ParentLink:
    """The link below the one being pulled: installed, or still staged and being checked."""

    store: SnapshotStore
    tag: str
    config: LayerConfig
    fetched: FetchedLink | None = None

    @property
    def dir(self) -> Path:
        if self.fetched is not None and not self.fetched.installed:
            return self.fetched.staged
        return self.store.path(self.tag)

    def whole(self, role: str) -> Callable[[], None] | None:
        """What a child's set-up waits on before it reads this link's ``role`` file: the staged
        file being whole (its parent's bytes copied in, perhaps still after its own chunks went in);
        None for an installed snapshot. Raises (when called) what setting that file up raised."""
        fetched = self.fetched
        if fetched is None or role not in fetched.assemblers:
            return None
        return fetched.assemblers[role].wait_whole


def head_tag_for(ref: Reference, as_tag: str | None) -> str:
    """The head's local tag: ``as_tag``, else the repository's name for ``latest``, else the
    repository's name plus the tag (or the pinned digest's first 12 hex digits)."""
    return as_tag or (
        local_tag_for(ref.repository)
        if (ref.tag or "latest") == "latest" and not ref.digest
        else local_tag_for(f"{ref.repository}-{ref.tag or (ref.digest or '').partition(':')[2][:12]}")
    )


__all__ = [
    "RESUME_MARKER",
    "FetchedLink",
    "LinkPulled",
    "ParentLink",
    "ParsedLink",
    "PullResult",
    "check_chain",
    "check_space",
    "head_tag_for",
    "index_installed",
    "installed_from",
    "local_tag_for",
    "local_tags",
    "marker_layer",
    "parent_sha256",
    "parse_link",
    "raise_failed_check",
    "repository_of",
    "when_all_ready",
]
