"""Helpers that make small sparse file images for tests."""

from __future__ import annotations

import os
import random
from pathlib import Path

PAGE = 4096


def has_data(piece: bytes | bytearray) -> bool:
    """Whether ``piece`` holds a non-zero byte (``any(piece)`` at C speed: these helpers scan whole images)."""
    return piece.count(0) != len(piece)


def write_sparse_image(path: Path, size: int, extents: list[tuple[int, bytes]]) -> Path:
    """Create ``path`` of ``size`` bytes (a hole) and write ``extents`` at their offsets."""
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in extents:
            f.seek(offset)
            f.write(data[: max(0, size - offset)])
    return path


def random_image(path: Path, rng: random.Random, size: int, n_extents: int = 6) -> Path:
    extents = []
    for _ in range(n_extents):
        offset = rng.randrange(0, max(1, size))
        length = rng.choice([1, 100, PAGE, 3 * PAGE + 17, 70_000, 200_000])
        kind = rng.random()
        if kind < 0.15:
            data = bytes(length)  # allocated zeros
        elif kind < 0.3:
            data = bytes([rng.randrange(1, 256)]) * length  # compressible
        else:
            data = rng.randbytes(length)
        extents.append((offset, data))
    return write_sparse_image(path, size, extents)


def mutate_image(src: Path, dst: Path, rng: random.Random, *, new_size: int | None = None, n_writes: int = 4) -> Path:
    data = bytearray(src.read_bytes())
    size = len(data) if new_size is None else new_size
    if size < len(data):
        del data[size:]
    else:
        data.extend(bytes(size - len(data)))
    for _ in range(n_writes):
        if not size:
            break
        offset = rng.randrange(0, size)
        length = min(size - offset, rng.choice([1, PAGE, 65536, 150_000]))
        if rng.random() < 0.3:
            data[offset : offset + length] = bytes(length)
        else:
            data[offset : offset + length] = rng.randbytes(length)
    with open(dst, "wb") as f:
        f.truncate(size)
        for offset in range(0, size, 65536):
            piece = data[offset : offset + 65536]
            if has_data(piece):
                f.seek(offset)
                f.write(piece)
    return dst


def same_bytes(a: Path, b: Path) -> bool:
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True
