"""A lazy session's working set: the chunks the hub's access profile says children read first,
for each served file (memory image, root filesystem), fetched before the children run.

:class:`WorkingSet` takes, per file, its :class:`~.image.LazyImage`, its path on the mount and
the hub profile's chunk order. Its *head* — the first ``wait_bytes`` of frames in profile order
(:func:`~.profile.profile_head`), taken in file order so that neighbours coalesce into few range
requests — is fetched at once on a background thread, every file's head concurrently;
:meth:`WorkingSet.wait_head` is what a fork waits for before it restores its children, and
:meth:`WorkingSet.warm_page_cache` then reads that head through the mount so that the kernel
answers the children's first reads (page faults, disk reads) without a FUSE round trip. The rest
of each profile follows on the same thread.

Errors: none raised; a chunk that fails is recorded on its image (and fails visibly when a child
reads it).
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .image import LazyImage
from .profile import profile_head

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


@dataclass
class ProfiledFile:
    """One served file and the hub profile's chunks of it."""

    image: LazyImage
    path: Path  # the file on the mount
    order: list[int]  # the profile: chunk indexes in first-read order
    head: list[int]  # what is fetched before children run, in file order


def _warm(f: ProfiledFile) -> None:
    """Read ``f``'s present head chunks through the mount, in runs, several at once."""
    runs = _runs([i for i in f.head if f.image.present[i]], f.image.plan.chunk_size, WARM_READ_BYTES)
    if not runs:
        return
    f.image.recording = False  # these reads are not a child's: keep them out of the profile
    fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel readahead past the runs into missing chunks
        with ThreadPoolExecutor(max_workers=WARM_THREADS, thread_name_prefix="forkd-lazy-warm") as pool:
            list(pool.map(lambda run: _read_quietly(fd, *run), runs))
    finally:
        os.close(fd)
        f.image.recording = True


class WorkingSet:
    """The hub profiles of a session's files (see the module docstring); :meth:`start` fetches
    them, :meth:`close` stops and joins. Files without a profile are left out."""

    def __init__(self, files: list[tuple[LazyImage, Path, list[int]]], wait_bytes: int) -> None:
        self.files = [
            ProfiledFile(image, path, order, sorted(order[: profile_head(image.plan, order, wait_bytes)]))
            for image, path, order in files
            if order
        ]
        self._stop = threading.Event()
        self._head_done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Fetch every file's head, then the rest of the profiles, on a background thread (at once
        done when there is no profile)."""
        if not self.files:
            self._head_done.set()
            return
        self._thread = threading.Thread(target=self._fetch, name="forkd-lazy-profile", daemon=True)
        self._thread.start()

    def _fetch(self) -> None:
        try:  # all of each head is waited for: in file order, so it coalesces into few ranges
            with ThreadPoolExecutor(max_workers=len(self.files), thread_name_prefix="forkd-lazy-profile") as pool:
                list(pool.map(lambda f: f.image.fill(f.head, self._stop, rest=False), self.files))
        finally:
            self._head_done.set()
        for f in self.files:
            f.image.fill(f.order[len(f.head) :], self._stop, rest=False)

    def wait_head(self, timeout: float | None = None) -> bool:
        """Wait until every file's head is present or failed (at once without a profile); False on timeout."""
        return self._head_done.wait(timeout)

    def wait_all(self, timeout: float | None = None) -> bool:
        """Wait until every profile's chunks were fetched (or failed); False on timeout."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def warm_page_cache(self) -> None:
        """Read each file's head through the mount, several runs at once, so that the kernel holds
        it in the mount's page cache (``kernel_cache``): a child's page faults and disk reads on it
        are then answered by the kernel instead of each waiting for a FUSE round trip through this
        process behind the child's single vCPU. Call after :meth:`wait_head`. Never raises: a read
        that fails here fails again, visibly, when a child makes it."""
        for f in self.files:
            _warm(f)

    def close(self) -> None:
        """Stop fetching and wait for the thread. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
