"""Checking a batch of uploaded recipe frames on the hub's cores, the blob's sha256 kept in order.

Every uploaded frame is checked (its bytes' blake3 is the frame digest, it decompresses to its
``raw_length`` bytes whose blake3 is its chunk digest) and every frame of the blob, uploaded or
held, goes into the blob's sha256 in recipe order. The checks of one batch are independent, so
they run split in :data:`CHECK_THREADS` parts (blake3 and zstd release the GIL): the calling
worker thread checks the first and then feeds the sha256, which must stay sequential, while a
small shared pool checks the others. A batch
reports the lowest-numbered frame that fails, as a one-thread check would.

Errors: ``HubError(DIGEST_INVALID)`` naming the frame (and its chunk) that does not match.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import blake3

from hub_server.errors import ErrorCode, HubError
from manifest.assemble import decompress_chunk
from manifest.digest import Hasher
from manifest.errors import ManifestError

if TYPE_CHECKING:
    from hub_server.registry.push.sha256state import ResumableSha256

__all__ = ["CHECK_THREADS", "RecipeFrameSpec", "check_frames"]

#: Threads the frame checks of all uploads share (the hub's cores, at most 4).
CHECK_THREADS = max(1, min(4, os.cpu_count() or 1))
#: Below this many uploaded frames a batch is checked on the calling thread alone.
_SPLIT_FRAMES = 8
_pool: ThreadPoolExecutor | None = None


@dataclass(frozen=True, slots=True)
class RecipeFrameSpec:
    """One frame of a recipe (``packs.py``): what a check holds its bytes against."""

    digest: str
    """blake3 of the frame's bytes."""
    chunk: str
    raw_length: int
    length: int
    inline: bool


Item = tuple[RecipeFrameSpec, bytes, int]


def _checkers() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=CHECK_THREADS, thread_name_prefix="frame-check")
    return _pool


def check_frames(hasher: Hasher | ResumableSha256, items: list[Item]) -> None:
    """In a worker thread: check the uploaded frames of ``items`` (``(spec, bytes, index)`` in recipe
    order), and hash every frame into the blob's sha256. Raises HubError (the first bad frame)."""
    inline = [item for item in items if item[0].inline]
    if CHECK_THREADS == 1 or len(inline) < _SPLIT_FRAMES:
        _check(inline)
        for _, data, _ in items:
            hasher.update(data)
        return
    step = -(-len(inline) // CHECK_THREADS)
    parts = [inline[i : i + step] for i in range(0, len(inline), step)]
    futures: list[Future[None]] = [_checkers().submit(_check, part) for part in parts[1:]]
    try:
        _check(parts[0])  # this thread takes the first part, then the sha256
        for _, data, _ in items:
            hasher.update(data)
    finally:
        errors = [f.exception() for f in futures]  # every part done before the batch is answered
    first = next((e for e in errors if e is not None), None)  # after part 0's: the lowest frame
    if first is not None:
        raise first


def _check(items: Sequence[Item]) -> None:
    for spec, data, index in items:
        got = "blake3:" + blake3.blake3(data).hexdigest()
        if got != spec.digest:
            raise HubError(
                ErrorCode.DIGEST_INVALID,
                f"recipe frame {index}: uploaded bytes hash to {got}, not {spec.digest}",
                {"frame": index, "expected": spec.digest, "actual": got},
            )
        try:
            decompress_chunk(data, spec.raw_length, spec.chunk, f"recipe frame {index} (chunk {spec.chunk})")
        except ManifestError as e:
            raise HubError(
                ErrorCode.DIGEST_INVALID,
                f"recipe frame {index} does not hold its chunk: {e}",
                {"frame": index, "chunk": spec.chunk},
            ) from None
