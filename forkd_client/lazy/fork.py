"""``forkd fork REF --lazy``: children of a hub chain started before it has finished downloading.

:func:`lazy_fork` starts a :class:`~.session.LazySession` (chain resolved and verified, head's
memory image, and root filesystem if it has one, mounted before their chunk maps are fetched),
checks the head's compat against this host, starts ``n`` VMM processes mapping the mounted image
and opening the mounted disk as the read-only base of their ``snapshot=on`` overlays
(``Driver.start_fork``), *then* fetches the maps and the vmstate
(:meth:`~.session.LazySession.prepare`) while those processes start, and restores the children
from the vmstate: copy-on-write children exactly as :func:`forkd_client.vmops.fork` makes them
from a local snapshot. The caller runs its command in them (:meth:`Forked.run`), then
:meth:`LazyFork.finish`: when a chunk could not be served (the child that read it got EIO: on a
page fault of its memory it stopped, on a disk read its guest got an I/O error) it raises
ChunkCorrupt / ChunkUnfetchable naming each chunk and installs nothing; otherwise it fills the
rest and installs the chain as ``forkd pull`` would.

Errors: LazyUnsupported, ChunkCorrupt, ChunkUnfetchable, VmSetupError, CompatibilityError,
RestoreFailed, the errors of :mod:`forkd_client.hub.pull`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

from vmm import StartedFork

from ..hub.client import HubClient
from ..hub.pullstages import PullResult
from ..hub.reference import Reference
from ..store import SnapshotStore
from ..vmmcompat import check_host_compat
from ..vmops.fork import Child, Forked
from ..vmops.host import make_driver, require_driver
from .errors import chunk_error
from .fusefs import fuse_module
from .image import LazyImage
from .session import LazySession


@dataclass
class LazyFork:
    """A lazy session and the children forked from it (see :func:`lazy_fork`)."""

    session: LazySession
    forked: Forked
    open_ms: float
    installed: PullResult | None = None
    saved_profile: str | None = None  # the access-profile referrer this fork attached
    stats: dict[str, int] = field(default_factory=dict)  # the memory image's, before the fill
    rootfs_stats: dict[str, int] | None = None  # the root filesystem's, before the fill

    def snapshot_stats(self) -> dict[str, int]:
        """Where the memory image's chunks came from so far."""
        return image_stats(self.session.image)

    def snapshot_rootfs_stats(self) -> dict[str, int] | None:
        """Where the root filesystem's chunks came from so far (None: the head has none)."""
        return None if self.session.rootfs is None else image_stats(self.session.rootfs)

    def finish(self, *, install: bool = True) -> None:
        """Stop the children (unless kept), then raise the chunk failures if any, else fill the
        rest and (with ``install``) install the chain. The stats before the fill stay in ``stats``
        and ``rootfs_stats``."""
        self.stats, self.rootfs_stats = self.snapshot_stats(), self.snapshot_rootfs_stats()
        if not self.forked.kept:
            self.forked.kill()
        self.session.raise_failures()
        if install:
            self.installed = self.session.fill_and_install(self.session.image.profile)

    def to_obj(self) -> dict[str, object]:
        return {
            "reference": str(self.session.ref),
            "digest": self.session.head_digest,
            "tag": self.session.head_tag,
            "open_ms": round(self.open_ms, 1),
            "before_fill": self.stats or self.snapshot_stats(),
            "rootfs_before_fill": self.rootfs_stats if self.stats else self.snapshot_rootfs_stats(),
            "failed_chunks": [f.to_obj() for f in self.session.failures],
            "profile": {"used": self.session.profile_note, "saved": self.saved_profile},
            "installed": None if self.installed is None else self.installed.to_obj(),
            **{k: v for k, v in self.forked.to_obj().items() if k not in ("tag",)},
        }


def image_stats(image: LazyImage) -> dict[str, int]:
    """Where ``image``'s chunks came from so far: fetched from the hub, copied from local
    snapshots, kept from an interrupted session (and the frame bytes fetched)."""
    return {
        "chunks": image.plan.count,
        "chunks_fetched": image.chunks_fetched,
        "chunks_local": image.chunks_local,
        "chunks_resumed": image.chunks_resumed,
        "bytes_fetched": image.bytes_fetched,
    }


def _warm_up(vmm: str | None) -> None:
    """Load libfuse and probe the VMM (``qemu --version``: tens of ms) while the chain is resolved,
    so neither is on the way to the children's start. Never raises: the real calls report."""
    with contextlib.suppress(Exception):
        fuse_module()
    with contextlib.suppress(Exception):
        make_driver(vmm).available()  # cached: require_driver below answers at once


def lazy_fork(
    store: SnapshotStore,
    client: HubClient,
    ref: Reference,
    n: int,
    *,
    as_tag: str | None = None,
    vmm: str | None = None,
    network: bool = False,
) -> LazyFork:
    """Open a lazy session of ``ref`` and start ``n`` children of its head. On any error the
    session is closed (its staged state kept). Raises what the module raises, ValueError (``n`` < 1)."""
    if n < 1:
        raise ValueError(f"fork needs at least one child, got {n}")
    started = time.monotonic()
    threading.Thread(target=_warm_up, args=(vmm,), name="forkd-lazy-warm-up", daemon=True).start()
    session = LazySession(store, client, ref, as_tag=as_tag)
    children: StartedFork | None = None
    try:
        files = session.start()
        driver = require_driver(vmm or files.compat.vmm)
        compat = session.head_compat
        check_host_compat(compat, driver, memory=files.memory, what=f"{ref}")  # type: ignore[arg-type]
        spawn_started = time.monotonic()
        children = driver.start_fork(files, n, network=network)  # the VMMs start while the maps and the vmstate arrive
        session.prepare()
        # with an access profile, the chunks children read first are fetched before they run
        # (they arrive in a few large requests; a child faulting on each would wait for many small ones)
        session.wait_for_profile_head()
        session.warm_page_cache()
        open_ms = (time.monotonic() - started) * 1000
        vms = children.finish()
        spawned = time.monotonic()
        forked = Forked(
            session.head_tag,
            list(session.chain),
            0.0,
            (spawned - spawn_started) * 1000,
            str(files.memory),
            [Child(i, vm, (spawned - spawn_started) * 1000) for i, vm in enumerate(vms)],
        )
    except BaseException as e:
        if children is not None:
            children.cancel()
        failures = session.failures
        session.close()
        if failures and not isinstance(e, KeyboardInterrupt):  # a child stopped on a chunk it could not read
            raise chunk_error(failures) from e
        raise
    return LazyFork(session, forked, open_ms)
