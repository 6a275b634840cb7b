"""One of the head's files (``memory.bin``, ``rootfs.ext4``), staged in a local file and filled on
demand (the heart of a lazy fork).

:class:`LazyImage` keeps the staged file (the full size of the head's file, e.g. ``memory.bin``,
sparse at first; its name is the file's role) and a present-bitmap next to it
(``memory.bin.present``, one byte per chunk, written after the chunk's bytes).
:meth:`LazyImage.read` serves a byte range: the chunks it touches that are not present are fetched first (:meth:`LazyImage.ensure`), then the bytes are read from
the staged file. Chunks local snapshots hold are copied in first (:meth:`LazyImage.adopt_local`,
from the local chunk index, re-hashed on read); a missing chunk comes from the hub as coalesced ranges of the layers'
data blobs through :meth:`RepositoryClient.read_ranges` (so presigned redirects and fetch plans work);
every frame is decompressed and checked against its chunk digest before it is written.
Concurrent reads of the same chunk fetch it once (the later ones wait for that chunk, not for the
rest of its request). A read that misses also fetches the missing chunks of the next
FORKD_LAZY_READAHEAD_BYTES (4 MiB; 0 turns it off) in the same request (a guest's memory is
clustered, and so are a file's blocks on ext4), and answers once its own chunks are verified and
written: the readahead's frames are verified and written on background threads, in order, each
waking the reads that wait for it.

A chunk that fails verification or cannot be fetched is recorded (:class:`ChunkFailure`) and
every read that touches it raises ChunkCorrupt / ChunkUnfetchable: wrong bytes are never served.

The first-read order of chunks is the page-access profile (:attr:`LazyImage.profile`);
:meth:`LazyImage.fill` fetches the rest, in a given order first (a profile), then in file order.

Errors: ChunkCorrupt, ChunkUnfetchable (forkd_client.lazy.errors), OSError.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import blake3

from manifest.assemble import decompress_chunk
from manifest.errors import AssemblyError, DigestMismatch, ManifestError
from manifest.fileops import punch_hole

from ..hub.client import HubClient
from ..hub.errors import GATEWAY_STATUSES, HubError, HubUnreachable
from ..hub.fill import MAX_RANGE_BYTES, PARALLEL_REQUESTS, tunable
from ..hub.lazystate import PRESENT_SUFFIX, write_chunk_list
from .errors import ChunkFailure, ImageUnavailable, chunk_error
from .plan import ImagePlan, Request
from .profile import FirstTouches

FILL_BATCH_CHUNKS = 128  # chunks one background-fill step asks for (8 MiB of 64 KiB chunks)
READAHEAD_BYTES = 4 << 20  # fetched after a missing read, in the same requests (memory, ext4 blocks: clustered)
#: frames of one blob at most this far apart are fetched in one range (the bytes between are
#: dropped): a guest's working set is clustered, and each range costs the hub a lookup
RANGE_GAP_BYTES = 128 << 10

#: a chunk's bytes from a local snapshot holding the same content (verified), or None
LocalReader = Callable[[str], bytes | None]


class LazyImage:
    """The head's file staged at ``path`` (named as its role: ``memory.bin``, ``rootfs.ext4``),
    filled on demand; see the module docstring.

    ``resume``: keep the chunks a previous session left in ``path`` whose bytes still hash
    right (the bitmap is a hint, never trusted).
    """

    def __init__(
        self,
        plan: ImagePlan,
        path: Path,
        client: HubClient,
        *,
        resume: bool = False,
    ) -> None:
        self.plan, self.path, self.client = plan, Path(path), client
        self.bitmap_path = self.path.with_name(self.path.name + PRESENT_SUFFIX)
        self.max_range = tunable("FORKD_PULL_RANGE_BYTES", MAX_RANGE_BYTES, 64 << 10)
        self.parallel = tunable("FORKD_PULL_PARALLEL", PARALLEL_REQUESTS, 1)
        #: chunks after a missing read fetched with it (FORKD_LAZY_READAHEAD_BYTES, default 4 MiB)
        self.readahead = tunable("FORKD_LAZY_READAHEAD_BYTES", READAHEAD_BYTES, 0) // plan.chunk_size
        self.failures: dict[int, ChunkFailure] = {}
        self._touches = FirstTouches(plan.count)
        self.profile = self._touches.order  # chunk indexes in the order reads first touched them
        self.recording = True  # off while the session itself reads through the mount (no child runs)
        self.bytes_fetched = 0  # frame bytes from the hub
        self.chunks_fetched = self.chunks_local = self.chunks_resumed = 0
        self._lock = threading.Lock()
        self._inflight: dict[int, threading.Event] = {}  # chunk -> set once present, failed or given up
        self._later_pool: ThreadPoolExecutor | None = None  # readahead frames verified after their read returned
        self._closed = False
        fresh = not (resume and self.path.is_file() and self.path.stat().st_size == plan.size)
        if fresh:
            self.path.unlink(missing_ok=True)
            self.bitmap_path.unlink(missing_ok=True)
        write_chunk_list(self.path, plan.chunk_size, [s.digest if s is not None else None for s in plan.sources])
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._bitmap_fd = os.open(self.bitmap_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(self._fd, plan.size)
            hint = os.pread(self._bitmap_fd, plan.count, 0) if not fresh else b""
            os.ftruncate(self._bitmap_fd, plan.count)
            self.present = bytearray(plan.count)
            for i, source in enumerate(plan.sources):
                if source is None:
                    if not fresh:  # a zero chunk is never written; make sure it reads as zeros
                        punch_hole(self._fd, i * plan.chunk_size, plan.length(i))
                    self.present[i] = 1
                elif i < len(hint) and hint[i] and self._holds(i, source.digest):
                    self.present[i] = 1
                    self.chunks_resumed += 1
            os.pwrite(self._bitmap_fd, bytes(self.present), 0)
        except BaseException:
            self.close()
            raise

    # -- state ------------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.plan.size

    @property
    def missing(self) -> int:
        return self.present.count(0)

    def present_chunks(self) -> Iterable[tuple[str, int, int]]:
        """``(digest, offset, length)`` of every present data chunk."""
        cs = self.plan.chunk_size
        for i, s in enumerate(self.plan.sources):
            if s is not None and self.present[i]:
                yield s.digest, i * cs, self.plan.length(i)

    def close(self) -> None:
        """Finish the background verification, close the staged file and bitmap (what is present
        stays, for a later session). Idempotent."""
        self._closed = True
        with self._lock:
            pool, self._later_pool = self._later_pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._release(list(self._inflight))
        for fd in (self._fd, self._bitmap_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._bitmap_fd = -1

    # -- serving ----------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` (fewer at the end of the image), their chunks fetched and
        verified first. Records the page-access profile. Raises ChunkCorrupt, ChunkUnfetchable."""
        indexes = self.plan.covering(offset, size)
        if self.recording:
            self._touches.touch(indexes)
        ahead: list[int] = []
        if self.readahead and indexes and not all(self.present[i] for i in indexes):
            end = min(indexes[-1] + 1 + self.readahead, self.plan.count)
            ahead = [j for j in range(indexes[-1] + 1, end) if not self.present[j]]
        self.ensure(indexes, ahead)
        return os.pread(self._fd, max(0, min(size, self.plan.size - offset)), offset)

    def ensure(self, indexes: Sequence[int], ahead: Sequence[int] = ()) -> None:
        """Make ``indexes`` present: fetch those nobody fetches yet (with ``ahead``, chunks fetched in
        the same requests but not waited for: their frames are verified and written after this
        returns, on the image's background threads), wait for those in flight, each chunk for
        itself. Raises ChunkCorrupt / ChunkUnfetchable naming every chunk of ``indexes`` (not of
        ``ahead``) that failed."""
        while True:
            mine, waits, extra = self._claim(indexes, ahead)
            if mine:
                try:
                    self._fetch(mine + extra, urgent=set(mine) if extra else None)
                except BaseException:
                    self._release(extra)  # whatever was not handed on: nobody may wait for it forever
                    raise
                finally:
                    self._release(mine)  # ``extra`` is released by whoever finishes its frames
            for event in waits:
                event.wait()
            if all(self.present[i] or i in self.failures for i in indexes):
                break
            # a chunk whose fetcher gave it up is neither present nor failed: fetch it here, unless
            # the image is closing (never answer with bytes nobody verified)
            if self._closed:
                raise ImageUnavailable("the lazy session was closed")
            ahead = ()
        failed = [self.failures[i] for i in indexes if i in self.failures]
        if failed:
            raise chunk_error(failed)

    def _claim(
        self, indexes: Sequence[int], ahead: Sequence[int]
    ) -> tuple[list[int], list[threading.Event], list[int]]:
        """Under the lock: the chunks of ``indexes`` this caller fetches, the events of those that
        others fetch, and (only when it fetches some) the chunks of ``ahead`` nobody fetches."""
        mine: list[int] = []
        waits: list[threading.Event] = []
        extra: list[int] = []
        with self._lock:
            for i in indexes:
                if self.present[i] or i in self.failures:
                    continue
                event = self._inflight.get(i)
                if event is None:
                    self._inflight[i] = threading.Event()
                    mine.append(i)
                else:
                    waits.append(event)
            if mine and not self._closed:
                for j in ahead:
                    if not self.present[j] and j not in self.failures and j not in self._inflight:
                        self._inflight[j] = threading.Event()
                        extra.append(j)
        return mine, waits, extra

    def _release(self, indexes: Iterable[int]) -> None:
        """Wake whoever waits for ``indexes`` that are still in flight (fetched, failed or given up)."""
        with self._lock:
            events = [e for e in (self._inflight.pop(i, None) for i in indexes) if e is not None]
        for event in events:
            event.set()

    def fill(self, first: Iterable[int] = (), stop: threading.Event | None = None, *, rest: bool = True) -> None:
        """Fetch every chunk not present: ``first`` (a page-access profile) first, then (with
        ``rest``) the others in file order, ``parallel`` batches at a time, until done or ``stop``
        is set. Chunks that fail are recorded (see :attr:`failures`), not raised."""
        wanted = [i for i in first if 0 <= i < self.plan.count]
        order = list(dict.fromkeys(wanted + list(range(self.plan.count)) if rest else wanted))
        todo = [i for i in order if not self.present[i]]
        batches = [todo[k : k + FILL_BATCH_CHUNKS] for k in range(0, len(todo), FILL_BATCH_CHUNKS)]

        def one(batch: list[int]) -> None:
            if stop is not None and stop.is_set():
                return
            with contextlib.suppress(HubError):  # recorded in self.failures
                self.ensure(batch)

        with ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="forkd-lazy-fill") as pool:
            list(pool.map(one, batches))

    def adopt_local(self, read: LocalReader, known: set[str]) -> int:
        """Copy in the missing chunks whose digest is in ``known`` (held by local snapshots):
        ``read(digest)`` gives their verified bytes or None. Returns how many were copied."""
        copied = 0
        for i, source in enumerate(self.plan.sources):
            if source is None or self.present[i] or source.digest not in known:
                continue
            data = read(source.digest)
            if data is not None and len(data) == self.plan.length(i):
                self._put(i, data, local=True)
                copied += 1
        return copied

    # -- fetching ---------------------------------------------------------------------------------

    def _holds(self, index: int, digest: str) -> bool:
        data = os.pread(self._fd, self.plan.length(index), index * self.plan.chunk_size)
        return "blake3:" + blake3.blake3(data).hexdigest() == digest

    def _put(self, index: int, data: bytes, *, local: bool = False) -> None:
        """Write chunk ``index``'s verified bytes, then mark it present (bitmap after the data)."""
        os.pwrite(self._fd, data, index * self.plan.chunk_size)
        os.pwrite(self._bitmap_fd, b"\x01", index)
        with self._lock:
            self.present[index] = 1
            if local:
                self.chunks_local += 1
            else:
                self.chunks_fetched += 1
        self._release((index,))  # whoever waits for this chunk goes on at once

    def _fail(self, index: int, reason: str, *, corrupt: bool, unreachable: bool = False) -> None:
        s = self.plan.sources[index]
        assert s is not None
        failure = ChunkFailure(
            s.layer, index, index * self.plan.chunk_size, s.digest, reason, corrupt, unreachable, self.path.name
        )
        with self._lock:
            self.failures.setdefault(index, failure)
        self._release((index,))

    def _fetch(self, indexes: list[int], urgent: set[int] | None = None) -> None:
        """Fetch and verify ``indexes`` (not present, owned by this caller); failures are recorded.
        With ``urgent``, only those chunks' frames are verified and written before this returns;
        the others' are handed to the background threads, which release them."""
        requests, places = self.plan.requests(indexes, self.max_range, RANGE_GAP_BYTES)
        if len(requests) == 1:
            self._fetch_request(requests[0], places, urgent)
            return
        with ThreadPoolExecutor(max_workers=min(self.parallel, len(requests))) as pool:
            list(pool.map(lambda r: self._fetch_request(r, places, urgent), requests))

    def _fetch_request(
        self, request: Request, places: dict[tuple[str, int], list[int]], urgent: set[int] | None = None
    ) -> None:
        repository, blob, ranges = request
        frames = [
            (offset, start, view_index)
            for view_index, (start, n) in enumerate(ranges)
            for offset in sorted(o for (b, o) in places if b == blob and start <= o < start + n)
        ]
        try:
            views = self.client.repository(repository).read_ranges(blob, ranges)
        except (HubError, OSError) as e:
            unreachable = isinstance(e, HubUnreachable | OSError) or e.status in GATEWAY_STATUSES
            for offset, _, _ in frames:
                for i in places[(blob, offset)]:
                    self._fail(i, f"from blob {blob}: {e}", corrupt=False, unreachable=unreachable)
            return
        if urgent is None:
            self._verify_frames(blob, frames, views, places)
            return
        now: list[tuple[int, int, int]] = []
        later: list[tuple[int, int, int]] = []
        for f in frames:
            (now if any(i in urgent for i in places[(blob, f[0])]) else later).append(f)
        self._verify_frames(blob, now, views, places)
        if later:
            self._later(blob, later, views, places)

    def _later(self, blob: str, frames: list[tuple[int, int, int]], views: list[memoryview], places: dict) -> None:
        """Verify and write ``frames`` on the background threads; release their chunks after."""
        chunks = [i for offset, _, _ in frames for i in places[(blob, offset)]]

        def run() -> None:
            try:
                self._verify_frames(blob, frames, views, places)
            finally:
                self._release(chunks)

        with self._lock:
            if self._later_pool is None and not self._closed:
                self._later_pool = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="forkd-lazy-later")
            pool = self._later_pool
        try:
            if pool is not None:
                pool.submit(run)
                return
        except RuntimeError:  # shut down meanwhile
            pass
        self._release(chunks)  # the image is closing: nobody waits for these any more

    def _verify_frames(
        self, blob: str, frames: list[tuple[int, int, int]], views: list[memoryview], places: dict
    ) -> None:
        """Decompress and check each frame against its chunk digest, then write it (or record why not)."""
        for offset, start, view_index in frames:
            at = places[(blob, offset)]
            source = self.plan.sources[at[0]]
            assert source is not None
            frame = views[view_index][offset - start : offset - start + source.length]
            try:
                data = decompress_chunk(
                    bytes(frame), self.plan.length(at[0]), source.digest, f"chunk {at[0]} ({source.digest})"
                )
            except (DigestMismatch, AssemblyError, ManifestError) as e:
                for i in at:
                    self._fail(i, f"frame at offset {offset} of blob {blob}: {e}", corrupt=True)
                continue
            with self._lock:
                self.bytes_fetched += source.length
            for i in at:
                self._put(i, data)
