"""``forkd pull``: fetch a chain from a hub, download only missing chunks, verify, install.

1. One request returns the chain base → head (manifests + configs, digests verified).
2. Links already installed from the same manifest are reused, while their files still hold
   what the layer describes (else InvalidSnapshotDir, or with ``force`` they are pulled again).
3. For the others, chunk maps (and vmstates) are fetched up front, all links at once
   (:mod:`.prefetch`), and verified. Each link's files are staged in a
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
   the parent's local tag (a link another pull installed meanwhile is kept as it is), each as
   soon as its check is done, by the main thread while the fill threads move the next link's
   bytes (a parent once the child's files no longer read it).

The pull is one :class:`ChainPull` whose methods are these stages (resolve → check the chain →
verify the signature → preflight plan → per link: reuse / fill / verify / install → result);
the stages that need no pull state are in :mod:`.pullstages`.

Errors: forkd_client.hub.errors (DigestInvalid names layer, file and chunk; DiskFull),
InvalidSnapshotDir, ClientError, OSError.
"""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from manifest import mediatypes as mt
from manifest.assemble import FileAssembler
from manifest.chunktree import ChunkList
from manifest.digest import digest_file
from manifest.errors import AssemblyError, DigestMismatch
from manifest.model import FileInfo, LayerConfig, LayerManifest
from manifest.vmstate import MAX_VMSTATE_BYTES, inflate_vmstate, max_vmstate_blob_bytes

from ..errors import InvalidSnapshotDir, SnapshotExists
from ..install import PrepareSpec
from ..snapdir import LocalSnapshot
from ..store import SnapshotStore
from .client import HubClient
from .errors import DigestInvalid, HubError
from .fill import FillPools, LinkFiles, fill_link
from .lazystate import ENTRIES_SUFFIX, entry_digests, open_index, write_chunk_list
from .linkcheck import chunk_lists, still_intact, verify_files
from .localchunks import LocalChunkIndex
from .peers import PeerOptions, PeerSource
from .prefetch import LinkPrefetch
from .preflight import PullPlan, check_arguments, index_held_head, plan_pull
from .progress import NullProgress, Progress
from .pullstages import (
    RESUME_MARKER,
    FetchedLink,
    LinkPulled,
    ParentLink,
    ParsedLink,
    PullResult,
    check_chain,
    check_space,
    head_tag_for,
    index_installed,
    installed_from,
    local_tag_for,
    local_tags,
    map_chunks,
    marker_layer,
    parent_sha256,
    parse_link,
    raise_failed_check,
    repository_of,
    when_all_ready,
)
from .reference import Reference
from .repository import ChainLink
from .signing import Verified, verify_head

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def pull(
    store: SnapshotStore,
    client: HubClient,
    ref: Reference,
    *,
    as_tag: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
    verify_keys: list[Ed25519PublicKey] | None = None,
    peers: PeerOptions | None = None,
) -> PullResult:
    """Pull ``ref`` into ``store``. With ``verify_keys``, the head must carry a signature by one of
    them (:func:`.signing.verify_head`, before anything is fetched), and no link is installed
    until every link passed its check. With ``peers``, chunks come from fleet peers holding the
    layers where they can (:mod:`.peers`), each verified. Raises SignatureInvalid and the errors of the module."""
    return ChainPull(
        store, client, ref, as_tag=as_tag, force=force, progress=progress, verify_keys=verify_keys, peers=peers
    ).run()


class ChainPull:
    """One pull of ``ref`` into ``store``; :meth:`run` reads as its stages: resolve the chain →
    check it → verify the head's signature → preflight plan → per link: reuse, or fill (staged,
    resumable) and verify (on the verifier thread) → install, base first → result. What the
    stages share (store, hub, progress, the staging and verifier, the links waiting for their
    check, the parent of the next link) lives here. Raises what :func:`pull` raises."""

    # set for the per-link stages by :meth:`_pull_links`
    index: LocalChunkIndex
    staging: contextlib.ExitStack
    verifier: ThreadPoolExecutor
    ahead: LinkPrefetch
    pools: FillPools

    def __init__(
        self,
        store: SnapshotStore,
        client: HubClient,
        ref: Reference,
        *,
        as_tag: str | None = None,
        force: bool = False,
        progress: Progress | None = None,
        verify_keys: list[Ed25519PublicKey] | None = None,
        peers: PeerOptions | None = None,
    ) -> None:
        self.store, self.client, self.ref = store, client, ref
        self.peer_options = peers
        self.peers: PeerSource | None = None  # asked of the hub once, in :meth:`_pull_links`
        self.repo = client.repository(ref.name)  # the links' blobs may live elsewhere: repository_of
        self.as_tag, self.force, self.verify_keys = as_tag, force, verify_keys
        self.progress = progress or NullProgress()
        self.parsed: list[ParsedLink] = []  # the chain, base → head
        self.verified: Verified | None = None  # who signed the head, with ``verify_keys``
        self.waiting: list[FetchedLink] = []  # fetched links, base first, not installed yet
        self.parent: ParentLink | None = None  # the link below the next one
        self.lists: dict[str, ChunkList] = {}  # format v2: the parent link's chunk lists
        self.backlog: list[ParsedLink] = []  # reused links not in ``lists`` yet

    @property
    def defer(self) -> bool:
        """All or nothing (a signed pull): install only once every link is checked."""
        return self.verified is not None

    def run(self) -> PullResult:
        check_arguments(self.as_tag)  # preflight: everything that can be refused is, before any transfer
        received_before = self.client.bytes_received
        self._resolve()
        check_chain(self.repo, self.ref, self.parsed)
        self._verify_signature()
        head_tag = head_tag_for(self.ref, self.as_tag)
        plan = self._plan(head_tag)
        result = PullResult(str(self.ref), self.parsed[-1][0].digest, head_tag, signed_by=self.verified)
        self._pull_links(plan, result)
        result.bytes_received = self.client.bytes_received - received_before
        route = self.client.mirror_route
        result.mirror = route.served_by if route is not None else None
        if self.peers is not None:
            result.bytes_by_peer = dict(self.peers.bytes_by_peer)
            result.peers_dropped = dict(self.peers.dropped)
            result.swarm_size = self.peers.swarm_size
        return result

    def _resolve(self) -> None:
        """One request for the chain base → head; each link's manifest and config parsed."""
        chain = self.repo.get_chain(self.ref.ref)
        self.parsed = [parse_link(link) for link in chain]

    def _verify_signature(self) -> None:
        if self.verify_keys:
            self.verified = verify_head(self.repo, self.parsed[-1][0].digest, self.verify_keys)

    def _plan(self, head_tag: str) -> PullPlan:
        """The local tags and what local snapshots already hold; the head's local copy indexed."""
        store, parsed = self.store, self.parsed
        plan = plan_pull(store, parsed, local_tags(store, parsed, head_tag), force=self.force)
        index_held_head(store, self.client.repository(repository_of(parsed[-1][0], self.ref)), plan, parsed[-1])
        return plan

    def _pull_links(self, plan: PullPlan, result: PullResult) -> None:
        """Links are pipelined: while one link's files are fsynced and hashed on the verifier
        thread, the next link is cloned from them and filled. Links are installed strictly base
        first, each once its check passed; on any error what is not installed yet stays staged,
        and the next attempt resumes from it (a file that failed its check is removed). Which links
        are reused is settled first, so every fetched link's chunk maps and vmstate are asked for
        at once (:class:`.prefetch.LinkPrefetch`), not link by link."""
        existing = [
            self._existing(plan, link, config, tag)
            for (link, _, config), tag in zip(self.parsed, plan.tags, strict=True)
        ]
        with contextlib.ExitStack() as self.staging:
            # asked for first: the hub answers while the local index opens (a database, and the
            # snapshots it indexes), which only the fills need
            self.ahead = LinkPrefetch(
                self.client,
                [(repository_of(p[0], self.ref), p, e is None) for p, e in zip(self.parsed, existing, strict=True)],
                lambda name, p: self._fetch_vmstate(name, p[0], p[1], p[2].files[mt.VMSTATE_FILE]),
            )
            self.staging.callback(self.ahead.close)
            if self.peer_options is not None:  # once per pull, for the layers it will fetch
                fetching = [p[0].digest for p, e in zip(self.parsed, existing, strict=True) if e is None]
                self.peers = PeerSource.ask_hub(self.repo, fetching, self.peer_options, self.progress)
            self.index = self._open_index()
            self.staging.callback(self.index.close)
            self.pools = FillPools()  # one set of fill threads for every link
            self.staging.callback(self.pools.close)
            self.verifier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forkd-verify")
            try:
                for (link, manifest, config), tag, held in zip(self.parsed, plan.tags, existing, strict=True):
                    result.links.append(self._pull_link(plan, link, manifest, config, tag, held))
                self._install_checked(block=True)
            finally:
                # checks in flight finish (and close their files) first; queued ones (Ctrl-C) never start
                self.verifier.shutdown(wait=True, cancel_futures=True)

    def _open_index(self) -> LocalChunkIndex:
        """Where chunks local files hold are looked up: installed snapshots, and the image a lazy
        session of this head staged (``fork --lazy``, :mod:`forkd_client.hub.lazystate`)."""
        return open_index(self.store, self.parsed[-1][0].digest)

    def _existing(self, plan: PullPlan, link: ChainLink, config: LayerConfig, tag: str) -> LocalSnapshot | None:
        """The local snapshot to reuse for the link: installed from this layer and intact (a changed
        one is refused, or with ``force`` pulled again). Raises InvalidSnapshotDir."""
        existing = installed_from(self.store, tag, link.digest) or plan.existing(tag)
        if existing is not None and not still_intact(self.store, existing, config):
            if not self.force:
                raise InvalidSnapshotDir(
                    f"local snapshot {tag!r} was pulled from layer {link.digest}, but its files have changed "
                    f"since; remove it (forkd rmi {tag}) or pull with --force to replace it"
                )
            existing = None  # pulled again, and replaced on install
        return existing

    def _pull_link(
        self,
        plan: PullPlan,
        link: ChainLink,
        manifest: LayerManifest,
        config: LayerConfig,
        tag: str,
        existing: LocalSnapshot | None,
    ) -> LinkPulled:
        """Reuse the link when ``existing`` (:meth:`_existing`); else fetch it, queue it for its
        check, and install the links whose check is done (unless deferred)."""
        if existing is not None:
            self.progress.log(f"{tag}: already present ({link.digest[:19]}…)")
            self.parent = ParentLink(self.store, tag, config)
            self.backlog.append((link, manifest, config))
            return LinkPulled(tag, link.digest, reused=True)
        for old in self.backlog:  # the chunk maps of reused links, to know the parent's chunk lists
            self.lists = chunk_lists(self.lists, self.ahead.maps(repository_of(old[0], self.ref), old))
        self.backlog = []
        try:
            fetched = self._fetch_link(link, manifest, config, tag)
        except Exception:
            # A failed check of an earlier link (its files removed under this one) is the
            # cause to report, not this link's missing parent: settle those checks first.
            if self.defer:
                raise_failed_check(self.waiting)
            else:
                self._install_checked(block=True)
            raise
        self.lists = fetched.lists
        if self.verified is not None and link is self.parsed[-1][0]:  # ``forkd inspect`` shows who signed it
            fetched.origin_extra = {"signed_by": self.verified.key, "signature": self.verified.artifact}
        self.waiting.append(fetched)
        if not self.defer:
            self._install_checked(block=False)
        self.parent = ParentLink(self.store, tag, config, fetched)
        return fetched.stats

    def _install_checked(self, *, block: bool, keep: FetchedLink | None = None) -> None:
        """Install the waiting links, base first, whose check is done (with ``block``, all of them),
        up to ``keep`` (not installed now: the parent of a link whose files still read its staged ones).
        When one fails its check, the staged files of the links built on it are not resumed."""
        waiting = self.waiting
        try:
            while waiting and waiting[0] is not keep and (block or waiting[0].verification.done()):
                self._install(waiting[0])
                waiting.pop(0)
        except DigestInvalid:
            for fetched in waiting:
                (fetched.staged / RESUME_MARKER).unlink(missing_ok=True)
            raise

    def _fetch_link(self, link: ChainLink, manifest: LayerManifest, config: LayerConfig, tag: str) -> FetchedLink:
        """Fetch one link's chunk maps and vmstate, stage its files on a clone of the parent's, write
        every changed chunk (verified on arrival), and hand the files to the verifier thread for the
        whole-file check. Raises DigestInvalid, DiskFull, HubError, OSError."""
        # A link's blobs live in the repository the hub names for it (a parent pushed elsewhere or
        # force-deleted here); it must be a well-formed name, and access is the hub's to check.
        name = repository_of(link, self.ref)
        maps = self.ahead.maps(name, (link, manifest, config))
        lists = chunk_lists(self.lists, maps) if manifest.version >= 2 else {}
        vm_info = config.files[mt.VMSTATE_FILE]
        vm_frame = self.ahead.vmstate(name, (link, manifest, config))
        parent = self.parent
        parent_dir = parent.dir if parent is not None else None
        check_space(self.store, maps, parent_dir, link.digest)
        # The staged files are the pull's resume state: a killed pull leaves them (with the marker
        # naming the layer, written once they were set up), and the next attempt keeps every chunk
        # they hold that still hashes right.
        staged, resume = self._stage(link.digest)
        marker = staged / RESUME_MARKER
        for role, chunk_map in maps.items():  # what the staged files will hold: read by ``forkd node`` (partial layers)
            write_chunk_list(staged / role, chunk_map.chunk_size, entry_digests(chunk_map), suffix=ENTRIES_SUFFIX)
        with open(staged / mt.VMSTATE_FILE, "wb") as out:  # inflated in bounded pieces, checked as it goes
            try:
                inflate_vmstate(vm_frame, vm_info, f"layer {link.digest}: vmstate", out)
            except (AssemblyError, DigestMismatch) as e:
                raise DigestInvalid(str(e)) from None
        stats = LinkPulled(tag, link.digest, reused=False)
        assemblers: dict[str, FileAssembler] = {}
        # the marker is written again once every staged file is whole (a clone on its thread is
        # done): a pull killed while a clone runs leaves nothing that would be resumed
        marker.unlink(missing_ok=True)
        ready = when_all_ready(len(maps), lambda: marker.write_text(json.dumps({"layer": link.digest})))
        try:
            for role, chunk_map in maps.items():
                parent_file = parent_dir / role if parent_dir is not None and (parent_dir / role).is_file() else None
                if chunk_map.parent_digest is not None and parent_file is None:
                    raise HubError(f"layer {link.digest}: {role} applies to a parent file this chain does not have")
                # set up on a thread of its own: the fetch starts meanwhile; writes wait for a reflink
                # clone, or else go in at once while the parent is copied around them
                assemblers[role] = FileAssembler(
                    chunk_map,
                    staged / role,
                    parent=parent_file,
                    resume=resume,
                    background=True,
                    on_ready=ready,
                    parent_ready=parent.whole(role) if parent is not None else None,
                )
            counts = fill_link(
                self.client.repository(name),
                self.index,
                LinkFiles(link.digest, tag, maps, assemblers),
                self.progress,
                self.pools,
                None if self.defer else functools.partial(self._install_while_filling, parent, assemblers),
                peers=self.peers,
            )
            stats.chunks_fetched, stats.chunks_local = counts.fetched, counts.local
            stats.chunks_resumed, stats.bytes_fetched = counts.resumed, counts.bytes_fetched
            stats.chunks_peers, stats.bytes_by_source = counts.peers, counts.by_source()
            for role, chunk_map in maps.items():  # later links of this pull read these here, not from the hub
                self.index.stage(staged / role, map_chunks(chunk_map))
        except BaseException as e:
            for assembler in assemblers.values():
                assembler.close()  # waits for their set-up threads: the marker is written, or never will be
            if any(below.verification.done() and below.verification.exception() is e for below in self.waiting):
                marker.unlink(missing_ok=True)  # built on a link that failed its check: never resumed
            raise
        verification = self.verifier.submit(verify_files, assemblers, staged / mt.VMSTATE_FILE, link.digest, tag, lists)
        return FetchedLink(tag, name, link, config, maps, stats, staged, parent, verification, lists, assemblers)

    def _install_while_filling(self, parent: ParentLink | None, filling: dict[str, FileAssembler]) -> None:
        """Called by the fill of the link whose files are ``filling``: install the links below whose
        check is done, the link's parent only once those files are whole (they no longer read its
        staged files, which the install renames). Raises what :meth:`_install_checked` raises."""
        whole = all(assembler.is_whole() for assembler in filling.values())
        self._install_checked(block=False, keep=None if whole or parent is None else parent.fetched)

    def _fetch_vmstate(self, name: str, link: ChainLink, manifest: LayerManifest, vm_info: FileInfo) -> bytes:
        """The link's vmstate frame, refused before it is requested when it declares more than the
        client's vmstate limit. Raises DigestInvalid, HubError."""
        if vm_info.size > MAX_VMSTATE_BYTES:
            raise DigestInvalid(
                f"layer {link.digest}: its vmstate declares {vm_info.size:,} bytes, over the "
                f"{MAX_VMSTATE_BYTES:,}-byte vmstate limit"
            )
        return self.client.repository(name).get_blob(
            manifest.vmstate.digest, manifest.vmstate.size, limit=max_vmstate_blob_bytes()
        )

    def _stage(self, layer: str) -> tuple[Path, bool]:
        """The layer's resumable staging directory, and whether it resumes an interrupted pull of
        this very layer (else it is emptied). Raises OSError."""
        staged = self.staging.enter_context(self.store.resumable_staging("pull-" + layer.split(":")[-1][:32]))
        resume = marker_layer(staged / RESUME_MARKER) == layer
        if not resume:
            for leftover in staged.iterdir():
                leftover.unlink()
        return staged, resume

    def _install(self, fetched: FetchedLink) -> None:
        """Wait for a fetched link's check, then install it as a forkd-compatible snapshot.

        Format v2: each chunked file's chunk-tree digest is recorded (proven by construction: every
        new chunk was verified on arrival, every other one is the verified parent's; no byte of the
        file is read again), and the link names its parent's memory.bin by its chunk tree too. v1:
        the files' blake3 digests (computed on the verifier thread) are recorded. forkd's
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
        for role, chunk_map in fetched.maps.items():
            if role in fetched.lists:  # the verifier checked the file's chunk tree against the map
                self.store.verified.record_chunk_tree(fetched.staged / role, chunk_map.chunk_size, chunk_map.digest)
        parent_sha, parent_digest, parent_tree = (
            self._parent_hashes(fetched, parent) if parent is not None else (None, None, None)
        )
        self.store.prepare(
            fetched.staged,
            PrepareSpec(
                tag,
                parent=parent.tag if parent else None,
                parent_content_hash=parent_sha,
                parent_digest=parent_digest,
                parent_tree=parent_tree,
                compat=config.compat,
                annotations=config.annotations,
                created=config.created,
                origin={
                    "hub": self.client.base_url,
                    "reference": f"{fetched.name}@{link.digest}",
                    "manifest_digest": link.digest,
                    **fetched.origin_extra,
                },
                known_digests=known,
                snapshot_json=dict(config.forkd or {"volumes": []}),
                algorithms=(),  # every file's digests are known: nothing is hashed here
                files_durable=True,  # the verifier fsynced every file (verify_files)
            ),
        )
        try:
            self.store.commit([(fetched.staged, tag)], force=self.force)
        except SnapshotExists:
            if installed_from(self.store, tag, link.digest) is None:
                raise
            # another pull installed this very layer meanwhile: keep theirs, drop ours
            shutil.rmtree(fetched.staged, ignore_errors=True)
        fetched.installed = True
        index_installed(self.store, self.index, tag, fetched.maps)
        stats = fetched.stats
        resumed = f", {stats.chunks_resumed} kept from an interrupted pull" if stats.chunks_resumed else ""
        peers = f", {stats.chunks_peers} from peers" if stats.chunks_peers else ""
        self.progress.log(
            f"{tag}: installed ({stats.chunks_fetched} chunks fetched, {stats.chunks_local} found locally{peers}{resumed})"
        )

    def _parent_hashes(
        self, fetched: FetchedLink, parent: ParentLink
    ) -> tuple[str, str | None, tuple[int, str] | None]:
        """The sha256 (forkd's ``parent_content_hash``) of the memory.bin of the link's parent, which
        must be the content the link applies to, and how our chain checks name it: v1 its blake3
        (hashed on the verifier thread), v2 its chunk tree (the parent layer's config; its file was
        checked against it), plus its blake3 only where already recorded. Raises DigestInvalid."""
        link, config, tag = fetched.link, fetched.config, fetched.tag
        parent_memory = parent.dir / mt.MEMORY_FILE
        parent_tree: tuple[int, str] | None = None
        if config.version >= 2:
            holds = parent.config.files[mt.MEMORY_FILE].digest
            parent_digest = self.store.verified.cached(parent_memory).get("blake3")
            if mt.MEMORY_FILE in fetched.maps:
                parent_tree = (fetched.maps[mt.MEMORY_FILE].chunk_size, holds)
        else:
            parent_digest = holds = self.store.verified.digests(parent_memory, ("blake3",))["blake3"]
        applies_to = fetched.maps[mt.MEMORY_FILE].parent_digest if mt.MEMORY_FILE in fetched.maps else holds
        if applies_to != holds:
            raise DigestInvalid(
                f"layer {link.digest} ({tag}): {mt.MEMORY_FILE} applies to parent content "
                f"{applies_to}, but {parent.tag!r} holds {holds}"
            )
        return parent_sha256(self.store, parent.tag, parent.config, parent_memory), parent_digest, parent_tree


__all__ = ["RESUME_MARKER", "ChainPull", "LinkPulled", "PullResult", "local_tag_for", "pull"]
