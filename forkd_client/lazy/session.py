"""A lazy session: a hub chain resolved and verified like a pull, its head's memory image served
lazily from a FUSE mount, filled in the background, then installed exactly as ``forkd pull`` installs it.

:meth:`LazySession.open` is :meth:`~LazySession.start` then :meth:`~LazySession.prepare`
(a lazy fork starts its children's VMM processes in between, so their start-up overlaps the fetches):

1. ``start`` resolves the chain (one request), checks it is one chain hanging off the head's digest,
   verifies the head's signature when the namespace has trusted keys (as ``forkd pull`` does:
   :func:`~forkd_client.hub.signing.keys_for_pull`) (:class:`~forkd_client.hub.pull.ChainPull`'s
   own stages), and mounts the head's image at the size its config gives
   (:class:`~.fusefs.PendingImage`: reads wait for step 2);
2. ``prepare`` fetches every link's chunk maps and the head's vmstate at once
   (:class:`~forkd_client.hub.prefetch.LinkPrefetch`, each map checked), stages the head's vmstate (checked against its digest as it is inflated) and the head's
   memory image (:class:`~.image.LazyImage`) in a resumable staging directory keyed by the
   head's digest (``<store>/.staging/resume-lazy-<hex>``): a killed session leaves the verified
   chunks there, and the next lazy session of the same head keeps them;
3. copies in the chunks local snapshots already hold (the local chunk index), lets the mount
   serve the image (:class:`~.fusefs.LazyMount`), and when the hub has an access profile for the
   head (:mod:`.profile`, asked for meanwhile), fetches those chunks in the background at once.

:meth:`LazySession.fill_and_install` fetches every chunk still missing (the page-access profile
first, when given) and then installs the chain with :class:`LazyInstall`, a ChainPull of the head
pinned by digest, whose local chunk index (:func:`..hub.lazystate.open_index`) also reads the staged image
(re-hashing each chunk): same verification, records and forkd-compatible layout as a pull, the
chunks fetched once.

Errors: LazyUnsupported, ChunkCorrupt, ChunkUnfetchable, SignatureError, the errors of
:mod:`forkd_client.hub.pull`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from manifest import mediatypes as mt
from manifest.errors import AssemblyError, DigestMismatch
from manifest.vmstate import inflate_vmstate
from vmm import SnapshotFiles

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
from .errors import LazyUnsupported, chunk_error
from .fusefs import LazyMount, PendingImage
from .image import LazyImage
from .plan import ImagePlan
from .profile import PROFILE_WAIT_BYTES, attach_profile, fetch_profile, profile_head

WARM_THREADS = 4
WARM_READ_BYTES = 1 << 20


def _runs(chunks: list[int], chunk_size: int, limit: int) -> list[tuple[int, int]]:
    """``(offset, length)`` byte runs covering sorted ``chunks``, neighbours merged, at most ``limit`` each."""
    runs: list[tuple[int, int]] = []
    for i in chunks:
        offset = i * chunk_size
        if runs and runs[-1][0] + runs[-1][1] == offset and runs[-1][1] + chunk_size <= limit:
            runs[-1] = (runs[-1][0], runs[-1][1] + chunk_size)
        else:
            runs.append((offset, chunk_size))
    return runs


def _read_quietly(fd: int, offset: int, length: int) -> None:
    with contextlib.suppress(OSError):
        os.pread(fd, length, offset)


class LazyInstall(ChainPull):
    """A pull of the lazy session's head, pinned by its digest: its local chunk index reads the
    session's staged image (:func:`..hub.lazystate.open_index`), so no chunk is fetched twice."""

    def __init__(self, session: LazySession) -> None:
        ref = dataclasses.replace(session.ref, digest=session.head_digest)
        super().__init__(session.store, session.client, ref, as_tag=session.head_tag, verify_keys=session.verify_keys)


class LazySession:
    """One lazily served chain head; use as a context manager (unmounts, keeps the staged state)."""

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
        self.chunks_local = 0
        self.installed: PullResult | None = None  # then the staged state is removed on close
        self.head_repository, self.head_manifest_size = ref.name, 0
        self.hub_profile: list[int] = []  # the access profile the hub had for the head
        self.profile_note = ""
        self._stop = threading.Event()
        self._prefetch: threading.Thread | None = None
        self._head_done = threading.Event()  # the head of the hub profile is in (see wait_for_profile_head)
        self._profile_head: list[int] = []  # its chunks, in file order
        #: how much of the hub profile (frame bytes, in its order) a fork waits for before its children run
        self.profile_wait_bytes = tunable("FORKD_LAZY_PROFILE_WAIT_BYTES", PROFILE_WAIT_BYTES, 0)
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
        for link, _, config in parsed:
            if mt.ROOTFS_FILE in config.files:
                raise LazyUnsupported(
                    f"layer {link.digest} has a {mt.ROOTFS_FILE}; a lazy fork serves memory images only "
                    "(use forkd pull, then forkd fork)"
                )
        memory = head_config.files.get(mt.MEMORY_FILE)
        if memory is None:
            raise LazyUnsupported(f"layer {head.digest} has no {mt.MEMORY_FILE}: nothing to fork from")
        self._pull, self._parsed = pull, parsed
        self.staged = staged = self._stack.enter_context(self.store.resumable_staging(state_key(head.digest)))
        write_head_marker(staged, head.digest)  # ``forkd node`` reports what it holds as a partial layer
        self._stack.callback(self._drop_if_installed)  # runs after the unmount below
        self._stack.callback(self._close_image)  # after the unmount too: no read reaches a closed image
        self.pending = PendingImage(memory.size)
        self.mount = LazyMount(self.pending, staged / "mnt")
        self._stack.callback(self.mount.unmount)
        self._stack.callback(self.pending.fail, "the lazy session was closed")  # waiting reads answer EIO
        self.files = SnapshotFiles(
            memory=self.mount.path,
            vmstate=staged / mt.VMSTATE_FILE,
            compat=from_manifest_compat(head_config.compat),
            rootfs=None,
        )
        return self.files

    def prepare(self) -> None:
        """The second half of :meth:`open`: every link's chunk maps and the head's vmstate,
        fetched concurrently (:class:`~forkd_client.hub.prefetch.LinkPrefetch`), checked; the
        vmstate staged (checked as it is inflated); the image's chunks that local snapshots hold
        copied in; then the mount serves the image, and the hub's access profile (asked for
        meanwhile) is fetched in the background. On error, reads waiting on the mount answer EIO
        and the caller closes the session. Raises what the module raises."""
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
            plan = ImagePlan.from_maps(
                [(p[0].digest, name, ahead.maps(name, p).get(mt.MEMORY_FILE)) for name, p in named]
            )
            if plan.size != self.pending.size:
                raise DigestInvalid(
                    f"layer {head.digest}: {mt.MEMORY_FILE} is {plan.size:,} bytes by its chunk maps, "
                    f"{self.pending.size:,} by its config"
                )
            frame = ahead.vmstate(named[-1][0], parsed[-1])
        finally:
            ahead.close()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="forkd-lazy-profile") as pool:
            profile = pool.submit(
                fetch_profile, self.client.repository(self.head_repository), head.digest, plan.chunk_size, plan.count
            )
            vm_info = head_config.files[mt.VMSTATE_FILE]
            with open(staged / mt.VMSTATE_FILE, "wb") as out:
                try:
                    inflate_vmstate(frame, vm_info, f"layer {head.digest}: vmstate", out)
                except (AssemblyError, DigestMismatch) as e:
                    raise DigestInvalid(str(e)) from None
            self.image = LazyImage(plan, staged / mt.MEMORY_FILE, self.client, resume=True)
            index = LocalChunkIndex(self.store.root / "chunk-index.db", self.store.verified)
            try:
                wanted = {s.digest for s in plan.sources if s is not None}
                self.chunks_local = self.image.adopt_local(index.read, index.known(wanted))
            finally:
                index.close()
            self.pending.set(self.image)
            self.hub_profile, self.profile_note = profile.result()
        if self.hub_profile:  # the working set first, in the background, while children start
            cut = profile_head(self.image.plan, self.hub_profile, self.profile_wait_bytes)
            self._profile_head = sorted(self.hub_profile[:cut])
            self._prefetch = threading.Thread(target=self._fetch_working_set, name="forkd-lazy-profile", daemon=True)
            self._prefetch.start()
            self._stack.callback(self._prefetch.join)
            self._stack.callback(self._stop.set)
        else:
            self._head_done.set()

    def _fetch_working_set(self) -> None:
        """The hub profile's chunks: its head (what children read first, up to
        FORKD_LAZY_PROFILE_WAIT_BYTES of frames), then the rest of it."""
        try:  # all of the head is waited for: in file order, so it coalesces into few ranges
            self.image.fill(self._profile_head, self._stop, rest=False)
        finally:
            self._head_done.set()
        self.image.fill(self.hub_profile[len(self._profile_head) :], self._stop, rest=False)

    def _close_image(self) -> None:
        if hasattr(self, "image"):
            self.image.close()

    def _drop_if_installed(self) -> None:
        if self.installed is not None and self.staged is not None:
            shutil.rmtree(self.staged, ignore_errors=True)

    def raise_failures(self) -> None:
        """Raise ChunkCorrupt / ChunkUnfetchable naming every chunk that could not be served, if any."""
        if self.image.failures:
            raise chunk_error(sorted(self.image.failures.values(), key=lambda f: f.index))

    def wait_for_profile_head(self, timeout: float | None = None) -> bool:
        """Wait until the head of the hub profile (the chunks children read first, up to
        :attr:`profile_wait_bytes` of frames) is present or failed; at once without a profile.
        A child restored after it faults on local chunks instead of waiting for the hub at every
        first touch. False on timeout."""
        return self._head_done.wait(timeout)

    def warm_page_cache(self) -> None:
        """Read the hub profile's head through the mount, several runs at once, so that the kernel
        holds it in the mount's page cache (``kernel_cache``): a child's page faults on it are then
        answered by the kernel instead of each waiting for a FUSE round trip through this process
        behind the child's single vCPU. Call after :meth:`wait_for_profile_head`. Never raises: a
        read that fails here fails again, visibly, when a child makes it."""
        runs = _runs(
            [i for i in self._profile_head if self.image.present[i]], self.image.plan.chunk_size, WARM_READ_BYTES
        )
        if not runs:
            return
        self.image.recording = False  # these reads are not a child's: keep them out of the profile
        fd = os.open(self.mount.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel readahead past the runs into missing chunks
            with ThreadPoolExecutor(max_workers=WARM_THREADS, thread_name_prefix="forkd-lazy-warm") as pool:
                list(pool.map(lambda run: _read_quietly(fd, *run), runs))
        finally:
            os.close(fd)
            self.image.recording = True

    def wait_for_working_set(self, timeout: float | None = None) -> bool:
        """Wait until the hub profile's chunks were fetched (or failed); False on timeout."""
        if self._prefetch is not None:
            self._prefetch.join(timeout)
            return not self._prefetch.is_alive()
        return True

    def save_profile(self) -> str:
        """Attach this session's page-access profile to the head layer on the hub; its digest.
        Raises the HubError family (Forbidden without push access)."""
        plan = self.image.plan
        return attach_profile(
            self.client.repository(self.head_repository),
            self.head_digest,
            self.head_manifest_size,
            plan.chunk_size,
            list(self.image.profile),
        )

    def fill_and_install(self, first: Iterable[int] = ()) -> PullResult:
        """Fetch every missing chunk (``first``, then the hub's access profile, first), then
        install the chain as a pull does. Raises ChunkCorrupt / ChunkUnfetchable (nothing
        installed), the errors of a pull."""
        self.image.fill([*first, *self.hub_profile])
        self.raise_failures()
        self.installed = LazyInstall(self).run()
        return self.installed
