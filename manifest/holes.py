"""The hole rule for chain links: a hole may stand only where the parent is zero too.

forkd's daemon assembles a chain by copying the base's ``memory.bin`` and then copying, for
each later link in order, only the *data* ranges (``SEEK_DATA``/``SEEK_HOLE``) of the link's
``memory.bin`` onto it (``apply_diff``, /work/shared/reference/forkd-formats.md §2.2–2.3).
A hole in a link therefore means "keep the parent's bytes", not "zeros". A link we write is
correct for forkd only when every hole of its ``memory.bin`` lies where the assembled parent
is zero as well; everywhere else the zeros must be real, allocated data.

Every writer of a link applies the rule: assembly writes a link's zero chunks as data
(:func:`write_zeros`), and the writers that take a file as it comes (unpack, import,
snapshot-diff) finish with :func:`fill_unsafe_holes`, which turns exactly the holes that
cover non-zero parent bytes into real zeros. Both keep the file's content (zeros either way);
only what ``SEEK_DATA`` reports changes. A filesystem without ``SEEK_DATA`` reports a file
as all data, which is always safe.

Errors: OSError from reading or writing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from .chunking import is_zero, zeros
from .fileops import data_ranges

PAGE = 4096  # zero-checking granularity: the smallest hole a filesystem makes
_READ = 1 << 20
_ZERO_WRITE = 1 << 20


def write_zeros(fd: int, offset: int, length: int) -> None:
    """Write ``length`` real zero bytes at ``offset`` (allocated data, never a hole)."""
    done = 0
    while done < length:
        n = min(_ZERO_WRITE, length - done)
        done += os.pwrite(fd, zeros(n), offset + done)


def hole_ranges(fd: int, size: int | None = None) -> Iterator[tuple[int, int]]:
    """``(offset, length)`` of the holes of an open file up to ``size`` (default: its size)."""
    if size is None:
        size = os.fstat(fd).st_size
    pos = 0
    for start, length in data_ranges(fd, size):
        if start > pos:
            yield pos, start - pos
        pos = start + length
    if pos < size:
        yield pos, size - pos


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Overlaps of two sorted lists of disjoint ``(offset, length)`` ranges."""
    i = j = 0
    while i < len(a) and j < len(b):
        start = max(a[i][0], b[j][0])
        end = min(a[i][0] + a[i][1], b[j][0] + b[j][1])
        if start < end:
            yield start, end - start
        if a[i][0] + a[i][1] < b[j][0] + b[j][1]:
            i += 1
        else:
            j += 1


def _nonzero_runs(pfd: int, offset: int, length: int) -> Iterator[tuple[int, int]]:
    """Runs (page-granular, clipped to the range) where the parent's bytes are not all zero."""
    end = offset + length
    pos = offset
    run_start: int | None = None
    while pos < end:
        block = os.pread(pfd, min(_READ, end - pos), pos)
        if not block:
            break
        if is_zero(block):
            if run_start is not None:
                yield run_start, pos - run_start
                run_start = None
        else:
            view = memoryview(block)
            # page boundaries are absolute, so runs line up with filesystem blocks
            k = 0
            while k < len(block):
                step = min(PAGE - (pos + k) % PAGE, len(block) - k)
                if is_zero(view[k : k + step]):
                    if run_start is not None:
                        yield run_start, pos + k - run_start
                        run_start = None
                elif run_start is None:
                    run_start = pos + k
                k += step
        pos += len(block)
    if run_start is not None:
        yield run_start, pos - run_start


def unsafe_holes(link: str | os.PathLike[str], parent: str | os.PathLike[str]) -> list[tuple[int, int]]:
    """The ranges where ``link`` has a hole but ``parent`` holds non-zero bytes.

    These are the bytes forkd's daemon would take from the parent instead of the link's
    zeros. Past the parent's end nothing is unsafe (the parent reads as zero there).
    """
    with open(link, "rb", buffering=0) as fl, open(parent, "rb", buffering=0) as fp:
        return list(_unsafe(fl.fileno(), fp.fileno()))


def _unsafe(lfd: int, pfd: int) -> Iterator[tuple[int, int]]:
    lsize, psize = os.fstat(lfd).st_size, os.fstat(pfd).st_size
    holes = list(hole_ranges(lfd, min(lsize, psize)))
    if not holes:
        return
    parent_data = list(data_ranges(pfd, min(lsize, psize)))
    for start, length in _intersect(holes, parent_data):
        yield from _nonzero_runs(pfd, start, length)


def fill_unsafe_holes(link: str | os.PathLike[str], parent: str | os.PathLike[str]) -> int:
    """Make ``link`` safe for forkd's assembly on top of ``parent``: write real zeros into
    every hole of ``link`` that covers non-zero bytes of ``parent``. The content of ``link``
    does not change. Returns the number of bytes written. Raises OSError."""
    written = 0
    with open(parent, "rb", buffering=0) as fp:
        fd = os.open(link, os.O_RDWR | os.O_CLOEXEC)
        try:
            for start, length in list(_unsafe(fd, fp.fileno())):
                write_zeros(fd, start, length)
                written += length
            if written:
                os.fsync(fd)
        finally:
            os.close(fd)
    return written
