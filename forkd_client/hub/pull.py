"""``forkd pull``: fetch a chain from a hub, download only missing chunks, verify, install.

1. One request returns the chain base → head (manifests + configs, digests verified).
2. Links already installed from the same manifest are reused, while their files still hold
   what the layer describes (else InvalidSnapshotDir, or with ``force`` they are pulled again).
3. For the others, chunk maps are fetched and verified. Each link's files are staged in a
   resumable directory on a reflink/copy of the parent's file and filled by
   :func:`~forkd_client.hub.fill.fill_link`: chunks the staged file already holds (an
   interrupted attempt), chunks local snapshots hold, and the rest fetched and verified on
   arrival, written straight into place.
4. Each assembled file is checked on a verifier thread while the next link is fetched: in
   format v2 its chunk-tree digest, derived in O(chunks) from the parent's chunk list and the
   layer's chunk map (every new chunk was verified on arrival, every other one is the verified
   parent's), must be the config's; in v1 its whole-file blake3. The files' blake3 (for the
   local verified-content record) is hashed there too, off the fetching thread. The links are
   installed atomically, base first, as forkd-compatible snapshots whose ``parent_tag`` names
   the parent's local tag (a link another pull installed meanwhile is kept as it is).

Errors: forkd_client.hub.errors (DigestInvalid names layer, file and chunk; DiskFull),
InvalidSnapshotDir, ClientError, OSError.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from manifest import mediatypes as mt
from manifest.assemble import FileAssembler
from manifest.chunktree import ChunkList
from manifest.digest import digest_bytes, digest_file
from manifest.errors import AssemblyError, DigestMismatch, ManifestError
from manifest.jsontext import loads as loads_json
from manifest.model import ChunkMap, LayerConfig, LayerManifest
from manifest.vmstate import MAX_VMSTATE_BYTES, inflate_vmstate, max_vmstate_blob_bytes

from ..errors import InvalidSnapshotDir, SnapshotExists, SnapshotNotFound
from ..snapdir import LocalSnapshot
from ..store import SnapshotStore
from .client import ChainLink, HubClient
from .errors import DigestInvalid, DiskFull, HubError
from .fill import fill_link
from .linkcheck import chunk_lists, fetch_maps, still_intact, verify_files
from .localchunks import LocalChunkIndex
from .preflight import check_arguments, index_held_head, plan_pull
from .progress import NullProgress, Progress
from .reference import Reference
from .signing import Verified, verify_head

RESUME_MARKER = ".resume.json"
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass
class LinkPulled:
    tag: str
    digest: str
    reused: bool
    chunks_fetched: int = 0
    chunks_local: int = 0  # read from local snapshots holding the same content
    chunks_resumed: int = 0  # kept from the staged files of an interrupted pull
    bytes_fetched: int = 0


@dataclass
class PullResult:
    reference: str
    digest: str
    tag: str
    links: list[LinkPulled] = field(default_factory=list)
    bytes_received: int = 0
    signed_by: Verified | None = None

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
            "links": [vars(link) for link in self.links],
        }
        if self.signed_by is not None:
            out["signature"] = self.signed_by.to_obj()
        return out


def local_tag_for(name: str) -> str:
    """A local tag from a hub name or tag: forkd's tag rules, at most 64 characters."""
    tag = _SAFE.sub("-", name).strip("-") or "snapshot"
    return tag[:64]


def pull(
    store: SnapshotStore,
    client: HubClient,
    ref: Reference,
    *,
    as_tag: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
    verify_keys: list[Ed25519PublicKey] | None = None,
) -> PullResult:
    """Pull ``ref`` into ``store``. With ``verify_keys``, the head must carry a signature by one of
    them (:func:`.signing.verify_head`, before anything is fetched), and no link is installed
    until every link passed its check. Raises SignatureInvalid and the errors of the module."""
    progress = progress or NullProgress()
    check_arguments(as_tag)  # preflight: everything that can be refused is, before any transfer
    received_before = client.bytes_received
    chain = client.get_chain(ref.name, ref.ref)
    parsed = [_parse_link(link) for link in chain]
    _check_chain(client, ref, parsed)
    verified = verify_head(client, ref.name, chain[-1].digest, verify_keys) if verify_keys else None
    defer = verified is not None  # all or nothing: install only once every link is checked
    head_tag = as_tag or (
        local_tag_for(ref.repository)
        if (ref.tag or "latest") == "latest" and not ref.digest
        else local_tag_for(f"{ref.repository}-{ref.tag or (ref.digest or '').partition(':')[2][:12]}")
    )
    plan = plan_pull(store, parsed, _local_tags(store, parsed, head_tag), force=force)
    tags = plan.tags
    index_held_head(store, client, _repository_of(parsed[-1][0], ref), plan, parsed[-1])
    result = PullResult(str(ref), chain[-1].digest, head_tag, signed_by=verified)
    # Links are pipelined: while one link's files are fsynced and hashed on the verifier thread,
    # the next link is cloned from them and filled. Links are installed strictly base first,
    # each once its check passed; on any error what is not installed yet stays staged, and
    # the next attempt resumes from it (a file that failed its check is removed).
    with contextlib.ExitStack() as staging:
        index = LocalChunkIndex(store.root / "chunk-index.db", store.verified)
        staging.callback(index.close)
        verifier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forkd-verify")
        waiting: list[_Fetched] = []
        parent: _Parent | None = None
        lists: dict[str, ChunkList] = {}  # format v2: the parent link's chunk lists
        backlog: list[tuple[ChainLink, LayerManifest, LayerConfig]] = []  # reused links not in ``lists`` yet
        try:
            for (link, manifest, config), tag in zip(parsed, tags, strict=True):
                existing = _installed(store, tag, link.digest) or plan.existing(tag)
                if existing is not None and not still_intact(store, existing, config):
                    if not force:
                        raise InvalidSnapshotDir(
                            f"local snapshot {tag!r} was pulled from layer {link.digest}, but its files have changed "
                            f"since; remove it (forkd rmi {tag}) or pull with --force to replace it"
                        )
                    existing = None  # pulled again, and replaced on install
                if existing is not None:
                    progress.log(f"{tag}: already present ({link.digest[:19]}…)")
                    result.links.append(LinkPulled(tag, link.digest, reused=True))
                    parent = _Parent(store, tag, config)
                    backlog.append((link, manifest, config))
                    continue
                for old in backlog:  # the chunk maps of reused links, to know the parent's chunk lists
                    lists = chunk_lists(lists, fetch_maps(client, _repository_of(old[0], ref), *old))
                backlog = []
                try:
                    fetched = _fetch_link(
                        store,
                        client,
                        index,
                        ref,
                        link,
                        manifest,
                        config,
                        tag,
                        parent,
                        staging,
                        verifier,
                        progress,
                        lists,
                    )
                except Exception:
                    # A failed check of an earlier link (its files removed under this one) is the
                    # cause to report, not this link's missing parent: settle those checks first.
                    if defer:
                        _raise_failed_check(waiting)
                    else:
                        _install_checked(store, client, index, waiting, force, progress, block=True)
                    raise
                lists = fetched.lists
                if verified is not None and link is chain[-1]:  # ``forkd inspect`` shows who signed it
                    fetched.origin_extra = {"signed_by": verified.key, "signature": verified.artifact}
                result.links.append(fetched.stats)
                waiting.append(fetched)
                if not defer:
                    _install_checked(store, client, index, waiting, force, progress, block=False)
                parent = _Parent(store, tag, config, fetched)
            _install_checked(store, client, index, waiting, force, progress, block=True)
        finally:
            # checks in flight finish (and close their files) first; queued ones (Ctrl-C) never start
            verifier.shutdown(wait=True, cancel_futures=True)
    result.bytes_received = client.bytes_received - received_before
    return result


def _install_checked(
    store: SnapshotStore,
    client: HubClient,
    index: LocalChunkIndex,
    waiting: list[_Fetched],
    force: bool,
    progress: Progress,
    *,
    block: bool,
) -> None:
    """Install the waiting links, base first, whose check is done (with ``block``, all of them).
    When one fails its check, the staged files of the links built on it are not resumed."""
    try:
        while waiting and (block or waiting[0].verification.done()):
            _install(store, client, index, waiting[0], force, progress)
            waiting.pop(0)
    except DigestInvalid:
        for fetched in waiting:
            (fetched.staged / RESUME_MARKER).unlink(missing_ok=True)
        raise


def _raise_failed_check(waiting: list[_Fetched]) -> None:
    """Deferred installs: re-raise the first failed check of the waiting links (their staged files
    are then not resumed), so it is reported rather than what it caused downstream."""
    for fetched in waiting:
        error = fetched.verification.exception()
        if error is not None:
            for later in waiting:
                (later.staged / RESUME_MARKER).unlink(missing_ok=True)
            raise error


@dataclass
class _Fetched:
    """A link whose changed chunks are written into its staged files, waiting for the
    verifier thread's whole-file check (``verification``: {role: digests}) and its install."""

    tag: str
    name: str
    link: ChainLink
    config: LayerConfig
    maps: dict[str, ChunkMap]
    stats: LinkPulled
    staged: Path
    parent: _Parent | None
    verification: Future
    lists: dict[str, ChunkList] = field(default_factory=dict)
    installed: bool = False
    origin_extra: dict[str, str] = field(default_factory=dict)


@dataclass
class _Parent:
    """The link below the one being pulled: installed, or still staged and being checked."""

    store: SnapshotStore
    tag: str
    config: LayerConfig
    fetched: _Fetched | None = None

    @property
    def dir(self) -> Path:
        if self.fetched is not None and not self.fetched.installed:
            return self.fetched.staged
        return self.store.path(self.tag)


def _parse_link(link: ChainLink) -> tuple[ChainLink, LayerManifest, LayerConfig]:
    try:
        manifest = LayerManifest.from_json(link.manifest)
        if str(digest_bytes(link.config, manifest.config.digest.split(":")[0])) != manifest.config.digest:
            raise DigestInvalid(f"layer {link.digest}: config does not match its digest {manifest.config.digest}")
        return link, manifest, LayerConfig.from_json(link.config)
    except ManifestError as e:
        raise HubError(f"layer {link.digest} is not a valid forkd snapshot layer: {e}") from None


def _check_chain(client: HubClient, ref: Reference, parsed: list) -> None:
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
        data, _ = client.get_manifest(ref.name, ref.digest)  # verified against the pinned digest
        try:
            listed = [m["digest"] for m in loads_json(data)["manifests"]]
        except (ValueError, KeyError, TypeError):
            listed = None
        if listed != digests:
            raise DigestInvalid(
                f"{ref}: the hub answered with the chain of {digests[-1]}, which {ref.digest} does not name"
            )


def _repository_of(link: ChainLink, ref: Reference) -> str:
    if link.repository == ref.name:
        return ref.name
    try:
        other = Reference.parse(link.repository)
    except HubError:
        raise HubError(f"the hub names an invalid repository {link.repository!r} for layer {link.digest}") from None
    return other.name


def _installed(store: SnapshotStore, tag: str, digest: str) -> LocalSnapshot | None:
    try:
        snap = store.get(tag)
    except SnapshotNotFound:
        return None
    return snap if (snap.origin or {}).get("manifest_digest") == digest else None


def _local_tags(store: SnapshotStore, parsed: list, head_tag: str) -> list[str]:
    """Local tags base → head: the head gets ``head_tag``; a parent gets the tag its child's config
    names, or that tag plus a digest suffix when a different snapshot already uses it."""
    tags = [head_tag]
    for i in range(len(parsed) - 1, 0, -1):
        child_config = parsed[i][2]
        parent_digest = parsed[i - 1][0].digest
        wanted = local_tag_for(child_config.parent.tag if child_config.parent and child_config.parent.tag else "layer")
        if (store.exists(wanted) and _installed(store, wanted, parent_digest) is None) or wanted in tags:
            wanted = local_tag_for(f"{wanted[:50]}-{parent_digest.split(':')[1][:12]}")
        tags.append(wanted)
    return list(reversed(tags))


def _fetch_link(
    store: SnapshotStore,
    client: HubClient,
    index: LocalChunkIndex,
    ref: Reference,
    link: ChainLink,
    manifest: LayerManifest,
    config: LayerConfig,
    tag: str,
    parent: _Parent | None,
    staging: contextlib.ExitStack,
    verifier: ThreadPoolExecutor,
    progress: Progress,
    parent_lists: dict[str, ChunkList],
) -> _Fetched:
    """Fetch one link's chunk maps and vmstate, stage its files on a clone of the parent's, write
    every changed chunk (verified on arrival), and hand the files to ``verifier`` for the
    whole-file check. Raises DigestInvalid, DiskFull, HubError, OSError."""
    # A link's blobs live in the repository the hub names for it (a parent pushed elsewhere or
    # force-deleted here); it must be a well-formed name, and access is the hub's to check.
    name = _repository_of(link, ref)
    maps = fetch_maps(client, name, link, manifest, config)
    lists = chunk_lists(parent_lists, maps) if manifest.version >= 2 else {}
    vm_info = config.files[mt.VMSTATE_FILE]
    if vm_info.size > MAX_VMSTATE_BYTES:
        raise DigestInvalid(
            f"layer {link.digest}: its vmstate declares {vm_info.size:,} bytes, over the "
            f"{MAX_VMSTATE_BYTES:,}-byte vmstate limit"
        )
    vm_frame = client.get_blob(name, manifest.vmstate.digest, manifest.vmstate.size, limit=max_vmstate_blob_bytes())

    parent_dir = parent.dir if parent is not None else None
    _check_space(store, maps, parent_dir, link.digest)
    # The staged files are the pull's resume state: a killed pull leaves them (with the marker
    # naming the layer, written once they were set up), and the next attempt keeps every chunk
    # they hold that still hashes right.
    staged = staging.enter_context(store.resumable_staging("pull-" + link.digest.split(":")[-1][:32]))
    marker = staged / RESUME_MARKER
    resume = _marker_layer(marker) == link.digest
    if not resume:
        for leftover in staged.iterdir():
            leftover.unlink()
    with open(staged / mt.VMSTATE_FILE, "wb") as out:  # inflated in bounded pieces, checked as it goes
        try:
            inflate_vmstate(vm_frame, vm_info, f"layer {link.digest}: vmstate", out)
        except (AssemblyError, DigestMismatch) as e:
            raise DigestInvalid(str(e)) from None
    stats = LinkPulled(tag, link.digest, reused=False)
    assemblers: dict[str, FileAssembler] = {}
    try:
        for role, chunk_map in maps.items():
            parent_file = parent_dir / role if parent_dir is not None and (parent_dir / role).is_file() else None
            if chunk_map.parent_digest is not None and parent_file is None:
                raise HubError(f"layer {link.digest}: {role} applies to a parent file this chain does not have")
            assemblers[role] = FileAssembler(chunk_map, staged / role, parent=parent_file, resume=resume)
        if not resume:
            marker.write_text(json.dumps({"layer": link.digest}))
        counts = fill_link(client, index, name, link.digest, tag, maps, assemblers, progress)
        stats.chunks_fetched, stats.chunks_local = counts.fetched, counts.local
        stats.chunks_resumed, stats.bytes_fetched = counts.resumed, counts.bytes_fetched
    except BaseException:
        for assembler in assemblers.values():
            assembler.close()
        raise
    verification = verifier.submit(verify_files, assemblers, staged / mt.VMSTATE_FILE, link.digest, tag, lists)
    return _Fetched(tag, name, link, config, maps, stats, staged, parent, verification, lists)


def _install(
    store: SnapshotStore, client: HubClient, index: LocalChunkIndex, fetched: _Fetched, force: bool, progress: Progress
) -> None:
    """Wait for a fetched link's check, then install it as a forkd-compatible snapshot.

    Its files' blake3 digests are recorded (computed here, over these bytes). forkd's
    ``parent_content_hash`` (sha256 of the parent's memory.bin) is taken from what is known:
    the VerifiedRecord, else the sha256 the parent layer's config states (computed by its
    pusher over the bytes whose blake3 was just checked; forkd itself re-checks it at every
    spawn, and ``forkd inspect --verify`` here), else hashed. Our own chain checks use the
    blake3 ``parent_digest``, so forking a pulled chain hashes nothing.
    """
    known = fetched.verification.result()
    link, config, tag, parent = fetched.link, fetched.config, fetched.tag, fetched.parent
    (fetched.staged / RESUME_MARKER).unlink(missing_ok=True)
    vm_info = config.files[mt.VMSTATE_FILE]
    known[mt.VMSTATE_FILE] = {
        "blake3": vm_info.digest,
        "sha256": str(digest_file(fetched.staged / mt.VMSTATE_FILE, ("sha256",))["sha256"]),
    }
    parent_sha = parent_digest = None
    if parent is not None:
        parent_memory = parent.dir / mt.MEMORY_FILE
        parent_digest = store.verified.digests(parent_memory, ("blake3",))["blake3"]
        # v2 names the parent's file by its chunk tree (the parent layer's config; its bytes were
        # checked against it), v1 by the blake3 of its bytes
        holds = parent.config.files[mt.MEMORY_FILE].digest if config.version >= 2 else parent_digest
        applies_to = fetched.maps[mt.MEMORY_FILE].parent_digest if mt.MEMORY_FILE in fetched.maps else holds
        if applies_to != holds:
            raise DigestInvalid(
                f"layer {link.digest} ({tag}): {mt.MEMORY_FILE} applies to parent content "
                f"{applies_to}, but {parent.tag!r} holds {holds}"
            )
        parent_sha = _parent_sha256(store, parent, parent_memory)
    store.prepare(
        fetched.staged,
        tag,
        parent=parent.tag if parent else None,
        parent_content_hash=parent_sha,
        parent_digest=parent_digest,
        compat=config.compat,
        annotations=config.annotations,
        created=config.created,
        origin={
            "hub": client.base_url,
            "reference": f"{fetched.name}@{link.digest}",
            "manifest_digest": link.digest,
            **fetched.origin_extra,
        },
        known_digests=known,
        snapshot_json=dict(config.forkd or {"volumes": []}),
        algorithms=("blake3",),
    )
    try:
        store.commit([(fetched.staged, tag)], force=force)
    except SnapshotExists:
        if _installed(store, tag, link.digest) is None:
            raise
        # another pull installed this very layer meanwhile: keep theirs, drop ours
        shutil.rmtree(fetched.staged, ignore_errors=True)
    fetched.installed = True
    _index_installed(store, index, tag, fetched.maps)
    stats = fetched.stats
    resumed = f", {stats.chunks_resumed} kept from an interrupted pull" if stats.chunks_resumed else ""
    progress.log(
        f"{tag}: installed ({stats.chunks_fetched} chunks fetched, {stats.chunks_local} found locally{resumed})"
    )


def _parent_sha256(store: SnapshotStore, parent: _Parent, memory: Path) -> str:
    """Lowercase hex sha256 of the parent's memory.bin for forkd's ``parent_content_hash``."""
    known = store.verified.cached(memory).get("sha256")
    if known is not None:
        return known.split(":", 1)[1]
    stated = parent.config.files.get(mt.MEMORY_FILE)
    if stated is not None and stated.sha256:
        return stated.sha256.split(":", 1)[1]
    return store.memory_sha256(parent.tag)


def _check_space(store: SnapshotStore, maps: dict[str, ChunkMap], parent: Path | None, layer: str) -> None:
    """Refuse up front when the link cannot fit: its changed chunks (zeroed ones included), plus a full copy of the
    parent's allocated bytes where the filesystem cannot reflink (counted pessimistically)."""
    # zero chunks count too: in a link they are written as real zeros (forkd reads holes as the parent's bytes)
    need = sum(min(m.chunk_size, m.size - e.index * m.chunk_size) for m in maps.values() for e in m.entries)
    if parent is not None:
        need += sum((parent / role).stat().st_blocks * 512 for role in maps if (parent / role).is_file())
    st = os.statvfs(store.root)
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise DiskFull(
            f"not enough disk space for layer {layer} under {store.root}: it may need "
            f"{need / 2**20:,.0f} MiB (changed chunks, plus a copy of the parent where the filesystem "
            f"cannot reflink), {free / 2**20:,.0f} MiB free"
        )


def _index_installed(store: SnapshotStore, index: LocalChunkIndex, tag: str, maps: dict[str, ChunkMap]) -> None:
    """The link's chunks now live in its installed files: index them there, so later pulls
    (of other chains sharing them) read them locally."""
    for role, chunk_map in maps.items():
        cs = chunk_map.chunk_size
        index.add(
            store.path(tag) / role,
            (
                (e.digest, e.index * cs, min(cs, chunk_map.size - e.index * cs))
                for e in chunk_map.entries
                if e.digest is not None
            ),
        )  # not a zero chunk


def _marker_layer(marker: Path) -> str | None:
    """The layer an interrupted pull's staged files were set up for, if the marker is sound."""
    try:
        return json.loads(marker.read_bytes()).get("layer")
    except (OSError, ValueError, AttributeError):
        return None


__all__ = ["LinkPulled", "PullResult", "local_tag_for", "pull"]
