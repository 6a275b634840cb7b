"""Sparse guest-memory-like images and file facts for the benchmarks.

:func:`make_memory_image` writes random 4 MiB blocks of data (alternately random bytes and
text-like bytes), the rest holes; :func:`make_child_image` copies one sparsely and dirties a
fraction of it in page-aligned runs.
"""

from __future__ import annotations

import errno
import os
import random
from dataclasses import dataclass
from pathlib import Path

from common import BLOCK, PAGE, KiB, MiB

# Bytes weighted roughly like English letter frequencies: ~4.1 bits of entropy per byte, so
# zstd compresses it about 2x, like the real /usr/lib mix in baselines.md §5. Built with
# bytes.translate so hundreds of MiB take well under a second.
_TEXT_WEIGHTS = {
    " ": 40,
    "e": 26,
    "t": 19,
    "a": 16,
    "o": 15,
    "i": 14,
    "n": 14,
    "s": 13,
    "h": 12,
    "r": 12,
    "d": 9,
    "l": 8,
    "c": 6,
    "u": 6,
    "m": 5,
    "w": 4,
    "f": 4,
    "g": 4,
    "y": 4,
    "p": 4,
    "b": 3,
    "\n": 3,
    "v": 2,
    "k": 2,
    ".": 2,
    ",": 2,
    "x": 1,
    "_": 1,
    "(": 1,
    ")": 1,
    "=": 1,
}


def _text_table() -> bytes:
    table = bytearray()
    for ch, w in _TEXT_WEIGHTS.items():
        table += ch.encode() * w
    assert len(table) <= 256
    while len(table) < 256:
        table += b"e"
    return bytes(table)


_TEXT_TABLE = _text_table()


def text_like(n: int, rng: random.Random) -> bytes:
    return rng.randbytes(n).translate(_TEXT_TABLE)


def random_bytes(n: int, rng: random.Random) -> bytes:
    return rng.randbytes(n)


@dataclass
class ImageInfo:
    path: Path
    size: int
    data_bytes: int  # non-hole bytes written


def make_memory_image(path: Path, size: int, data_bytes: int, seed: int) -> ImageInfo:
    """A sparse image of ``size`` bytes whose ``data_bytes`` (rounded to 4 MiB blocks, spread at
    random) hold data, alternately random and text-like blocks; the rest are holes."""
    rng = random.Random(seed)
    nblocks = size // BLOCK
    chosen = sorted(rng.sample(range(nblocks), data_bytes // BLOCK))
    with open(path, "wb") as f:
        f.truncate(size)
        for i, b in enumerate(chosen):
            f.seek(b * BLOCK)
            f.write(random_bytes(BLOCK, rng) if i % 2 else text_like(BLOCK, rng))
    return ImageInfo(path, size, len(chosen) * BLOCK)


def sparse_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` keeping holes (SEEK_DATA/SEEK_HOLE), never sharing extents."""
    size = src.stat().st_size
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        fo.truncate(size)
        fd = fi.fileno()
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            fi.seek(start)
            fo.seek(start)
            remaining = end - start
            while remaining:
                piece = fi.read(min(8 * MiB, remaining))
                fo.write(piece)
                remaining -= len(piece)
            pos = end


def make_child_image(parent: Path, child: Path, fraction: float, seed: int, run: int = 64 * KiB) -> int:
    """``child`` = ``parent`` with ``fraction`` of its apparent size rewritten in ``run``-byte runs at
    random page-aligned offsets (anywhere: in data or in holes, as a guest allocating memory does),
    half random and half text-like. Returns the number of bytes that now differ, counted in 4 KiB pages."""
    sparse_copy(parent, child)
    rng = random.Random(seed)
    size = parent.stat().st_size
    runs = max(1, int(size * fraction) // run)
    offsets = sorted({rng.randrange(0, (size - run) // PAGE) * PAGE for _ in range(runs)})
    with open(child, "r+b") as f:
        for i, off in enumerate(offsets):
            f.seek(off)
            f.write(random_bytes(run, rng) if i % 2 else text_like(run, rng))
    return changed_bytes(parent, child, PAGE)


def changed_bytes(a: Path, b: Path, granule: int) -> int:
    """Bytes of ``granule``-sized pieces that differ between two equally sized files."""
    changed = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(8 * MiB), fb.read(8 * MiB)
            if not x and not y:
                break
            if x == y:
                continue
            for o in range(0, max(len(x), len(y)), granule):
                if x[o : o + granule] != y[o : o + granule]:
                    changed += min(granule, max(len(x), len(y)) - o)
    return changed


def make_vmstate(path: Path, seed: int) -> None:
    """A small stand-in for a VMM's device state (a few tens of KiB, like QEMU's)."""
    rng = random.Random(seed)
    path.write_bytes(text_like(24 * KiB, rng) + random_bytes(8 * KiB, rng))


def drop_file_cache(path: Path) -> None:
    """Evict one file from the page cache (per file, so other people's work is not disturbed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fs_used(path: Path) -> int:
    """Bytes in use on the filesystem holding ``path`` (statvfs: shared reflinked extents count once)."""
    os.sync()
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def allocated(path: Path) -> int:
    """Allocated bytes under ``path`` by st_blocks (each file counted in full, shared or not)."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file() and not p.is_symlink())
