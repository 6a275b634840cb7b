"""Errors of a lazy fork: a chain that cannot be served lazily, and a chunk that could not be served.

    ClientError (forkd_client.errors)
    ├── LazyUnsupported          the chain cannot be served lazily (say why; ``forkd pull`` still works)
    ├── ProfileNotRecorded       push --record-profile: the recording child's command failed (exit 1)
    └── HubError (forkd_client.hub.errors)
        ├── ChunkUnfetchable     a chunk's bytes could not be fetched (the read that needed it got EIO)
        │   └── ChunksUnreachable  ... because the hub or its store did not answer (also a
        │                          HubUnreachable: exit 5, network; retrying later may help)
        └── DigestInvalid
            └── ChunkCorrupt     a chunk's bytes did not match its digest (the read got EIO; exit 6)

Both chunk errors carry the :class:`ChunkFailure` records naming the file (``memory.bin`` or
``rootfs.ext4``), layer, chunk index, file offset and digest.
"""

from __future__ import annotations

from dataclasses import dataclass

from manifest import mediatypes as mt

from ..errors import ClientError
from ..hub.errors import DigestInvalid, HubError, HubUnreachable


@dataclass(frozen=True)
class ChunkFailure:
    """A chunk of one of the head's served files (memory image, root filesystem) that could not be
    served, and why."""

    layer: str  # manifest digest of the layer whose chunk map lists it
    index: int  # chunk index in the head's file
    offset: int  # byte offset in the head's file
    digest: str  # the chunk's digest
    reason: str
    corrupt: bool  # True: bytes arrived but did not verify; False: they could not be fetched
    unreachable: bool = False  # not fetched because nothing answered (no connection, timeout, a gateway 5xx)
    file: str = mt.MEMORY_FILE  # the file role: memory.bin or rootfs.ext4

    def describe(self) -> str:
        return (
            f"layer {self.layer}: {self.file} chunk {self.index} (offset {self.offset}, {self.digest}) "
            f"{'is corrupt' if self.corrupt else 'could not be fetched'}: {self.reason}"
        )

    def to_obj(self) -> dict[str, object]:
        return {
            "file": self.file,
            "layer": self.layer,
            "index": self.index,
            "offset": self.offset,
            "digest": self.digest,
            "reason": self.reason,
            "corrupt": self.corrupt,
        }


class LazyUnsupported(ClientError):
    """The chain cannot be forked lazily (the message says why); ``forkd pull`` then ``forkd fork`` works."""


class ProfileNotRecorded(ClientError):
    """``forkd push --record-profile``: the recording child's command failed or could not run, so
    its reads are no working set to publish (the message names the command and the child's answer)."""


SHOWN_FAILURES = 3  # chunks named in an error's message (``failures`` holds them all)


def _message(failures: list[ChunkFailure]) -> str:
    text = "; ".join(f.describe() for f in failures[:SHOWN_FAILURES])
    more = len(failures) - SHOWN_FAILURES
    return text + (f" (and {more} more chunk{'s' if more > 1 else ''})" if more > 0 else "")


class ChunkUnfetchable(HubError):
    """A chunk could not be fetched; ``failures`` names each."""

    def __init__(self, failures: list[ChunkFailure]) -> None:
        super().__init__(_message(failures), code="CHUNK_UNAVAILABLE")
        self.failures = failures


class ChunksUnreachable(ChunkUnfetchable, HubUnreachable):
    """Chunks could not be fetched because the hub or its object store did not answer."""


class ChunkCorrupt(DigestInvalid):
    """A chunk did not verify against its digest; ``failures`` names each."""

    def __init__(self, failures: list[ChunkFailure]) -> None:
        super().__init__(_message(failures), code="DIGEST_INVALID")
        self.failures = failures


def chunk_error(failures: list[ChunkFailure]) -> HubError:
    """The error to raise for ``failures``: ChunkCorrupt when any chunk was corrupt; else
    ChunksUnreachable when nothing answered for any of them; else ChunkUnfetchable."""
    if any(f.corrupt for f in failures):
        return ChunkCorrupt(failures)
    if all(f.unreachable for f in failures):
        return ChunksUnreachable(failures)
    return ChunkUnfetchable(failures)


class ImageUnavailable(Exception):
    """A read of a mounted image whose session stopped before the image could be served (the
    FUSE layer answers EIO; the session's own error says why). Never reaches a user."""
