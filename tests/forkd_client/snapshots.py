"""Helpers that make small sparse snapshot source directories for client tests."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

from tests.manifest.images import has_data

MEM_SIZE = 4 << 20
PAGE = 4096


def make_base_source(directory: Path, *, seed: int = 1, size: int = MEM_SIZE, rootfs: bool = False) -> Path:
    """A directory with a sparse memory.bin (a few data extents in a 4 MiB hole) and a vmstate."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "memory.bin", "wb") as f:
        f.truncate(size)
        for offset in (0, 3 * 65536, size // 2, size - 2 * PAGE):
            f.seek(offset)
            f.write(rng.randbytes(2 * PAGE))
    (directory / "vmstate").write_bytes(rng.randbytes(3000))
    if rootfs:
        with open(directory / "rootfs.ext4", "wb") as f:
            f.truncate(1 << 20)
            f.write(rng.randbytes(PAGE))
    return directory


def make_link_source(directory: Path, parent_memory: Path, *, seed: int) -> Path:
    """A chain link: the parent's full memory image with a few pages dirtied, plus a new vmstate."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    data = bytearray(parent_memory.read_bytes())
    with open(directory / "memory.bin", "wb") as f:
        f.truncate(len(data))
        for offset in range(0, len(data), 65536):
            piece = data[offset : offset + 65536]
            if has_data(piece):
                f.seek(offset)
                f.write(piece)
        for _ in range(3):
            offset = rng.randrange(0, len(data) // PAGE) * PAGE
            f.seek(offset)
            f.write(rng.randbytes(PAGE))
    (directory / "vmstate").write_bytes(rng.randbytes(2500))
    return directory


def make_zeroing_link(directory: Path, parent_memory: Path, *, seed: int, size: int | None = None) -> Path:
    """A link that zeroes memory the parent held (left as holes, as a VMM punching freed pages
    or a sparse copy would), dirties other pages, and optionally grows or shrinks."""
    src = make_link_source(directory, parent_memory, seed=seed)
    memory = src / "memory.bin"
    data = bytearray(memory.read_bytes())
    parent = parent_memory.read_bytes()
    cut = [off for off in range(0, len(parent), PAGE) if has_data(parent[off : off + PAGE])][:3]
    assert cut, "the parent must hold data to zero"
    new = bytearray(len(data) if size is None else size)
    new[: min(len(data), len(new))] = data[: len(new)]
    for off in cut:
        if off < len(new):
            new[off : off + PAGE] = bytes(PAGE)
    if size is not None and size > len(data):
        new[-PAGE:] = b"\x5a" * PAGE  # data in the grown part
    with open(memory, "wb") as f:  # zero pages become holes
        f.truncate(len(new))
        for off in range(0, len(new), PAGE):
            if has_data(new[off : off + PAGE]):
                f.seek(off)
                f.write(new[off : off + PAGE])
    return src


def sha256_hex(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def scribble(path: Path, offset: int = 100, data: bytes = b"changed!") -> None:
    """Change bytes in place (same size), as a stray writer would."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def age(path: Path, seconds: int = 3600) -> None:
    """Set a file's mtime well into the past, so a fresh record of it is not racy."""
    st = os.stat(path)
    past = st.st_mtime_ns - seconds * 1_000_000_000
    os.utime(path, ns=(past, past))
