"""Inflate a layer's vmstate blob (one zstd frame) in bounded pieces, checking it as it goes.

A vmstate blob is tiny when compressed and may claim to be huge: 32 KiB of zstd inflate to
1 GiB. Nothing here ever holds more than one piece of the output in memory, and the output
is refused as soon as it passes what the config declares or :data:`MAX_VMSTATE_BYTES`
(whichever is smaller). The hub runs it at push with no output (check only); the client
runs it on pull writing the staged ``vmstate`` file.
"""

from __future__ import annotations

import io
from typing import BinaryIO

import zstandard

from .digest import Hasher
from .errors import AssemblyError, DigestMismatch
from .model import FileInfo
from .zstdframe import FrameError, frame_length

__all__ = ["MAX_VMSTATE_BYTES", "inflate_vmstate", "max_vmstate_blob_bytes"]

#: largest vmstate we accept (QEMU's full migration stream, RAM included, is ~164 MiB for a
#: 512 MiB guest; a vmstate next to a separate memory image is KiB to a few MiB)
MAX_VMSTATE_BYTES = 512 << 20
_PIECE = 1 << 20


def max_vmstate_blob_bytes(limit: int = MAX_VMSTATE_BYTES) -> int:
    """The largest compressed blob a vmstate of at most ``limit`` bytes can need (zstd's bound)."""
    return limit + (limit >> 8) + (64 << 10)


def inflate_vmstate(
    blob: bytes | memoryview,
    expected: FileInfo,
    what: str,
    out: BinaryIO | None = None,
    *,
    limit: int = MAX_VMSTATE_BYTES,
) -> None:
    """Decompress ``blob`` piece by piece into ``out`` (or nowhere), checking it against ``expected``.

    Raises: AssemblyError (the declared size is over ``limit``, the blob is not exactly one
    zstd frame, or it inflates past the declared size), DigestMismatch (size or digest differ).
    """
    if expected.size > limit:
        raise AssemblyError(f"{what}: declares {expected.size:,} bytes, over the {limit:,}-byte vmstate limit")
    try:
        end = frame_length(blob)
    except FrameError as e:
        raise AssemblyError(f"{what}: {e}") from None
    if end != len(blob):
        raise AssemblyError(f"{what}: {len(blob) - end} bytes follow the zstd frame")
    hasher = Hasher(expected.digest.partition(":")[0])
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob)) as reader:
            while piece := reader.read(_PIECE):
                if hasher.size + len(piece) > expected.size:
                    raise AssemblyError(f"{what}: inflates past its declared {expected.size:,} bytes")
                hasher.update(piece)
                if out is not None:
                    out.write(piece)
    except zstandard.ZstdError as e:
        raise AssemblyError(f"{what}: not a valid zstd frame: {e}") from None
    got = str(hasher.digest())
    if hasher.size != expected.size:
        raise DigestMismatch(f"{what} ({hasher.size:,} of {expected.size:,} bytes)", expected.digest, got)
    if got != expected.digest:
        raise DigestMismatch(what, expected.digest, got)
