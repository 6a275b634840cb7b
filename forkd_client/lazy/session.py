"""A lazy session: a hub chain resolved and verified like a pull, its head's memory image served
lazily from a FUSE mount, filled in the background, then installed exactly as ``forkd pull`` installs it.

:meth:`LazySession.open` is :meth:`~LazySession.start` then :meth:`~LazySession.prepare`
(a lazy fork starts its children's VMM processes in between, so their start-up overlaps the fetches):

1. ``start`` resolves the chain (one request), checks it is one chain hanging off the head's digest,
   verifies the head's signature when the namespace has trusted keys (as ``forkd pull`` does:
   :func:`~forkd_client.hub.signing.keys_for_pull`) (:class:`~forkd_client.hub.pull.ChainPull`'s
   own stages), and mounts the head's files at the sizes its config gives
   (:class:`~.fusefs.PendingImage`: reads wait for step 2): ``memory.bin``, and ``rootfs.ext4``
   when the head has a root filesystem (children open it read-only, as the base of their
   ``snapshot=on`` disk overlays);
2. ``prepare`` fetches every link's chunk maps and the head's vmstate at once
   (:class:`~forkd_client.hub.prefetch.LinkPrefetch`, each map checked), stages the head's
   vmstate (checked against its digest as it is inflated) and each served file
   (:class:`~.image.LazyImage`, planned from the chunk maps of the links that make it:
   :func:`~.plan.file_links`) in a resumable staging directory keyed by the head's digest
   (``<store>/.staging/resume-lazy-<hex>``): a killed session leaves the verified chunks there,
   and the next lazy session of the same head keeps them;
3. copies in the chunks local snapshots already hold (the local chunk index), lets the mount
   serve the files (:class:`~.fusefs.LazyMount`), and when the hub has an access profile for the
   head (:mod:`.profile`, asked for meanwhile: its memory image's chunks, and its root
   filesystem's), fetches those chunks in the background at once (:mod:`.workingset`). With
   ``FORKD_LAZY_ROOTFS_WHOLE=1`` the root filesystem is fetched whole here, before ``prepare``
   returns (children then never wait for a disk read).

:meth:`LazySession.fill_and_install` fetches every chunk still missing (of each file, what the
children read first, then the hub's access profile) and then installs the chain with
:class:`LazyInstall`, a ChainPull of the head pinned by digest, whose local chunk index
(:func:`..hub.lazystate.open_index`) also reads the staged files (re-hashing each chunk): same
verification, records and forkd-compatible layout as a pull, the chunks fetched once.

Errors: LazyUnsupported, ChunkCorrupt, ChunkUnfetchable, SignatureError, HubError (a file a
link's map applies to that its parent does not have), the errors of :mod:`forkd_client.hub.pull`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from manifest import mediatypes as mt
from manifest.errors import AssemblyError, DigestMismatch
from manifest.vmstate import inflate_vmstate
from vmm import SnapshotFiles
from vmm.base import ROOTFS_DEVICE

from ..hub.client import HubClient
from ..hub.errors import DigestInvalid
from ..hub.fill import tunable
from ..hub.lazystate import state_key, write_head_marker
from ..hub.localchunks import LocalChunkIndex
from ..hub.prefetch import LinkPrefetch
from ..hub.pull import ChainPull
from ..hub.pullstages import ParsedLink, PullResult, check_chain, head_tag_for, repository_of
from ..hub.reference import Reference
from ..hub.signing import keys_for_pull
from ..store import SnapshotStore
from ..vmmcompat import from_manifest_compat
from .errors import ChunkFailure, LazyUnsupported, chunk_error
from .fusefs import LazyMount, PendingImage
from .image import LazyImage
from .plan import ChainFiles, ImagePlan, file_links
from .profile import PROFILE_WAIT_BYTES, FileProfile, attach_profile, fetch_profiles
from .workingset import WorkingSet

#: FORKD_LAZY_ROOTFS_WHOLE=1: the root filesystem is fetched whole before the children run (the
#: alternative to serving it lazily, measured in bench/lazy_fork_rootfs.py)
ROOTFS_WHOLE_DEFAULT = 0


class LazyInstall(ChainPull):
    """A pull of the lazy session's head, pinned by its digest: its local chunk index reads the
    session's staged image (:func:`..hub.lazystate.open_index`), so no chunk is fetched twice."""

    def __init__(self, session: LazySession) -> None:
        ref = dataclasses.replace(session.ref, digest=session.head_digest)
        super().__init__(session.store, session.client, ref, as_tag=session.head_tag, verify_keys=session.verify_keys)


class LazySession:
    """One lazily served chain head; use as a context manager (unmounts, keeps the staged state).

    :attr:`image` is the head's memory image, :attr:`rootfs` its root filesystem (None when the
    head has none); both exist once :meth:`prepare` has run."""

    image: LazyImage
    mount: LazyMount
    pending: PendingImage
    _pull: ChainPull
    _parsed: list[ParsedLink]

    def __init__(self, store: SnapshotStore, client: HubClient, ref: Reference, *, as_tag: str | None = None) -> None:
        self.store, self.client, self.ref = store, client, ref
        self.verify_keys: list[Ed25519PublicKey] | None = None  # set by open(), as a pull sets them
        self.head_tag = head_tag_for(ref, as_tag)
        self.head_digest = ""
        self.head_compat: dict = {}
        self.chain: list[str] = []  # layer digests, base → head
        self.staged: Path | None = None
        self.files: SnapshotFiles | None = None
        self.rootfs: LazyImage | None = None
        self.pending_rootfs: PendingImage | None = None
        self.chunks_local = 0
        self.installed: PullResult | None = None  # then the staged state is removed on close
        self.head_repository, self.head_manifest_size = ref.name, 0
        self.hub_profile: list[int] = []  # the access profile the hub had for the head's memory image
        self.hub_rootfs_profile: list[int] = []  # ... and for its root filesystem
        self.profile_note = ""
        self.working_set = WorkingSet([], 0)  # the hub profiles' chunks, fetched first (set by prepare)
        #: how much of each hub profile (frame bytes, in its order) a fork waits for before its children run
        self.profile_wait_bytes = tunable("FORKD_LAZY_PROFILE_WAIT_BYTES", PROFILE_WAIT_BYTES, 0)
        #: whether the root filesystem is fetched whole in :meth:`prepare` instead of on demand
        self.rootfs_whole = tunable("FORKD_LAZY_ROOTFS_WHOLE", ROOTFS_WHOLE_DEFAULT, 0) > 0
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> LazySession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmount and close; the staged state stays for a later session or pull. Idempotent."""
        self._stack.close()

    def open(self) -> SnapshotFiles:
        """Resolve, verify and mount; the files a driver forks from. Raises what the module raises."""
        try:
            files = self.start()
            self.prepare()
            return files
        except BaseException:
            self.close()
            raise

    def start(self) -> SnapshotFiles:
        """The first half of :meth:`open`: resolve and verify the chain, then mount the head's image
        at its configured size *before* its chunk maps are fetched (reads wait until
        :meth:`prepare` has them). A driver may open and map the returned files at once (start its
        children), but may read the vmstate only after :meth:`prepare`. The caller closes the
        session on error. Raises what the module raises."""
        self.verify_keys = keys_for_pull(self.ref.namespace)  # trusted-keys.json binds lazy forks as it binds pulls
        pull = ChainPull(self.store, self.client, self.ref, verify_keys=self.verify_keys)
        pull._resolve()
        pull._verify_signature()
        parsed = pull.parsed
        check_chain(pull.repo, self.ref, parsed)
        head, _, head_config = parsed[-1]
        self.head_digest, self.head_compat = head.digest, dict(head_config.compat or {})
        self.head_repository, self.head_manifest_size = repository_of(head, self.ref), len(head.manifest)
        self.chain = [link.digest for link, _, _ in parsed]
        memory = head_config.files.get(mt.MEMORY_FILE)
        if memory is None:
            raise LazyUnsupported(f"layer {head.digest} has no {mt.MEMORY_FILE}: nothing to fork from")
        rootfs = head_config.files.get(mt.ROOTFS_FILE)
        compat = from_manifest_compat(head_config.compat)
        if rootfs is None and ROOTFS_DEVICE in compat.device_ids:
            raise LazyUnsupported(
                f"layer {head.digest} boots a disk its layer does not carry (no {mt.ROOTFS_FILE}; forkd's "
                "snapshot.json names one outside the snapshot): use forkd pull, then forkd fork"
            )
        self._pull, self._parsed = pull, parsed
        self.staged = staged = self._stack.enter_context(self.store.resumable_staging(state_key(head.digest)))
        write_head_marker(staged, head.digest)  # ``forkd node`` reports what it holds as a partial layer
        self._stack.callback(self._drop_if_installed)  # runs after the unmount below
        self._stack.callback(self._close_images)  # after the unmount too: no read reaches a closed image
        self.pending = PendingImage(memory.size)
        served = {mt.MEMORY_FILE: self.pending}
        if rootfs is not None:
            self.pending_rootfs = served[mt.ROOTFS_FILE] = PendingImage(rootfs.size)
        self.mount = LazyMount(served, staged / "mnt")
        self._stack.callback(self.mount.unmount)
        for pending in served.values():  # waiting reads answer EIO
            self._stack.callback(pending.fail, "the lazy session was closed")
        self.files = SnapshotFiles(
            memory=self.mount.path_of(mt.MEMORY_FILE),
            vmstate=staged / mt.VMSTATE_FILE,
            compat=compat,
            rootfs=self.mount.path_of(mt.ROOTFS_FILE) if rootfs is not None else None,
        )
        return self.files

    def prepare(self) -> None:
        """The second half of :meth:`open`: every link's chunk maps and the head's vmstate,
        fetched concurrently (:class:`~forkd_client.hub.prefetch.LinkPrefetch`), checked; the
        vmstate staged (checked as it is inflated); the files' chunks that local snapshots hold
        copied in; then the mount serves the files (with FORKD_LAZY_ROOTFS_WHOLE=1 the root
        filesystem is fetched whole first), and the hub's access profile (asked for meanwhile) is
        fetched in the background. On error, reads waiting on the mount answer EIO and the caller
        closes the session. Raises what the module raises."""
        pull, parsed, staged = self._pull, self._parsed, self.staged
        assert staged is not None, "start() first"
        head, _, head_config = parsed[-1]
        named = [(repository_of(p[0], self.ref), p) for p in parsed]
        ahead = LinkPrefetch(
            self.client,
            [(name, p, p is parsed[-1]) for name, p in named],  # the head's vmstate only
            lambda name, p: pull._fetch_vmstate(name, p[0], p[1], p[2].files[mt.VMSTATE_FILE]),
        )
        try:
            links = [(p[0].digest, name, p[2], ahead.maps(name, p)) for name, p in named]
            plans = {role: self._plan(role, pending.size, links) for role, pending in self._served().items()}
            frame = ahead.vmstate(named[-1][0], parsed[-1])
        finally:
            ahead.close()
        plan = plans[mt.MEMORY_FILE]
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="forkd-lazy-profile") as pool:
            geometry = {role: (p.chunk_size, p.count) for role, p in plans.items()}
            profile = pool.submit(fetch_profiles, self.client.repository(self.head_repository), head.digest, geometry)
            vm_info = head_config.files[mt.VMSTATE_FILE]
            with open(staged / mt.VMSTATE_FILE, "wb") as out:
                try:
                    inflate_vmstate(frame, vm_info, f"layer {head.digest}: vmstate", out)
                except (AssemblyError, DigestMismatch) as e:
                    raise DigestInvalid(str(e)) from None
            self.image = LazyImage(plan, staged / mt.MEMORY_FILE, self.client, resume=True)
            if mt.ROOTFS_FILE in plans:
                self.rootfs = LazyImage(plans[mt.ROOTFS_FILE], staged / mt.ROOTFS_FILE, self.client, resume=True)
            index = LocalChunkIndex(self.store.root / "chunk-index.db", self.store.verified)
            try:
                wanted = {s.digest for p in plans.values() for s in p.sources if s is not None}
                known = index.known(wanted)
                self.chunks_local = sum(image.adopt_local(index.read, known) for image in self.images())
            finally:
                index.close()
            self.pending.set(self.image)
            if self.pending_rootfs is not None and self.rootfs is not None:
                self.pending_rootfs.set(self.rootfs)
            if self.rootfs is not None and self.rootfs_whole:  # children start once the disk is all local
                self.rootfs.fill()
                if self.rootfs.failures:
                    raise chunk_error(sorted(self.rootfs.failures.values(), key=lambda f: f.index))
            profiles, self.profile_note = profile.result()
        self.hub_profile = profiles.get(mt.MEMORY_FILE, [])
        self.hub_rootfs_profile = profiles.get(mt.ROOTFS_FILE, [])
        # the working set first, in the background, while children start
        profiled = [(self.image, self.mount.path_of(mt.MEMORY_FILE), self.hub_profile)]
        if self.rootfs is not None:
            profiled.append((self.rootfs, self.mount.path_of(mt.ROOTFS_FILE), self.hub_rootfs_profile))
        self.working_set = WorkingSet(profiled, self.profile_wait_bytes)
        self.working_set.start()
        self._stack.callback(self.working_set.close)

    def _served(self) -> dict[str, PendingImage]:
        """The mounted files, by role (memory first)."""
        served = {mt.MEMORY_FILE: self.pending}
        if self.pending_rootfs is not None:
            served[mt.ROOTFS_FILE] = self.pending_rootfs
        return served

    def _plan(self, role: str, size: int, links: list[ChainFiles]) -> ImagePlan:
        """The chunk table of the head's ``role``, checked against the ``size`` its config gives.
        Raises LazyUnsupported, HubError, DigestInvalid."""
        plan = ImagePlan.from_maps(file_links(role, links), role)
        if plan.size != size:
            raise DigestInvalid(
                f"layer {self.head_digest}: {role} is {plan.size:,} bytes by its chunk maps, {size:,} by its config"
            )
        return plan

    def images(self) -> list[LazyImage]:
        """The served files' images (memory, then the root filesystem if any), once prepared."""
        if not hasattr(self, "image"):
            return []
        return [self.image] if self.rootfs is None else [self.image, self.rootfs]

    @property
    def failures(self) -> list[ChunkFailure]:
        """Every chunk that could not be served, of any file (memory first), by index."""
        return [f for image in self.images() for f in sorted(image.failures.values(), key=lambda f: f.index)]

    def _close_images(self) -> None:
        for image in self.images():
            image.close()

    def _drop_if_installed(self) -> None:
        if self.installed is not None and self.staged is not None:
            shutil.rmtree(self.staged, ignore_errors=True)

    def raise_failures(self) -> None:
        """Raise ChunkCorrupt / ChunkUnfetchable naming every chunk (of any served file) that could
        not be served, if any."""
        if failures := self.failures:
            raise chunk_error(failures)

    def wait_for_profile_head(self, timeout: float | None = None) -> bool:
        """Wait until the head of each hub profile (the chunks children read first, up to
        :attr:`profile_wait_bytes` of frames per file) is present or failed; at once without a
        profile. A child restored after it faults on local chunks instead of waiting for the hub
        at every first touch. False on timeout."""
        return self.working_set.wait_head(timeout)

    def warm_page_cache(self) -> None:
        """Read the hub profiles' heads through the mount (:meth:`.WorkingSet.warm_page_cache`).
        Call after :meth:`wait_for_profile_head`. Never raises."""
        self.working_set.warm_page_cache()

    def wait_for_working_set(self, timeout: float | None = None) -> bool:
        """Wait until the hub profiles' chunks were fetched (or failed); False on timeout."""
        return self.working_set.wait_all(timeout)

    def save_profile(self) -> str:
        """Attach this session's access profile (the first reads of its memory image, and of its
        root filesystem when it has one) to the head layer on the hub; its digest. Raises the
        HubError family (Forbidden without push access)."""
        disk = self.rootfs
        more = [] if disk is None else [FileProfile(mt.ROOTFS_FILE, disk.plan.chunk_size, list(disk.profile))]
        return attach_profile(
            self.client.repository(self.head_repository),
            self.head_digest,
            self.head_manifest_size,
            self.image.plan.chunk_size,
            list(self.image.profile),
            more=more,
        )

    def fill_and_install(self, first: Iterable[int] = ()) -> PullResult:
        """Fetch every missing chunk (of the memory image: ``first``, then the hub's access
        profile, first; of the root filesystem: the blocks read so far, then its hub profile,
        first), then install the chain as a pull does. Raises ChunkCorrupt / ChunkUnfetchable
        (nothing installed), the errors of a pull."""
        self.image.fill([*first, *self.hub_profile])
        if self.rootfs is not None:
            self.rootfs.fill([*self.rootfs.profile, *self.hub_rootfs_profile])
        self.raise_failures()
        self.installed = LazyInstall(self).run()
        return self.installed
