"""The page-access profile: which chunks of a head's memory image children read first, in order.

A lazy session records the order in which reads first touched each chunk
(:attr:`~.image.LazyImage.profile`). ``forkd fork --lazy --save-profile`` attaches it to the head
layer on the hub as an OCI referrer of artifact type :data:`ARTIFACT_TYPE` (one JSON document,
``{"file": "memory.bin", "chunkSize": N, "chunks": [index, …]}``; needs push access); a later lazy
session of the same head fetches the newest one first and fetches those chunks before anything
else (working set first), then the rest in file order.

A profile is only an ordering hint: a malformed one is ignored (:func:`fetch_profile` returns an
empty list and says why), and it never changes which bytes are served.

Errors: the HubError family (attaching).
"""

from __future__ import annotations

import json
import threading

from manifest import mediatypes as mt

from ..hub.errors import HubError
from ..hub.referrers import Document, fetch_documents, push_referrer
from ..hub.repository import RepositoryClient
from .plan import ImagePlan

ARTIFACT_TYPE = "application/vnd.forkd.access-profile.v1+json"
MAX_PROFILE_CHUNKS = 1 << 22  # 256 GiB of 64 KiB chunks
#: how much of a profile (frame bytes, in its order) a lazy fork fetches before its children run:
#: a second at 256 Mbit/s, and more than the first answer of the bench's guest reads (17 MiB)
PROFILE_WAIT_BYTES = 32 << 20


class FirstTouches:
    """The order in which reads first touched each of ``count`` chunks (a page-access profile),
    recorded from any number of threads."""

    def __init__(self, count: int) -> None:
        self.order: list[int] = []  # chunk indexes, first touch first
        self._touched = bytearray(count)
        self._lock = threading.Lock()

    def touch(self, chunks: range) -> None:
        """Record ``chunks`` (the chunks one read covers) not touched before, in order."""
        if all(self._touched[chunks.start : chunks.stop]):
            return
        with self._lock:
            for i in chunks:
                if not self._touched[i]:
                    self._touched[i] = 1
                    self.order.append(i)


def profile_head(plan: ImagePlan, chunks: list[int], limit: int) -> int:
    """How many of ``chunks`` (a profile, in order) fit in ``limit`` bytes of frames to fetch
    (zero chunks cost nothing)."""
    total = 0
    for n, i in enumerate(chunks):
        source = plan.sources[i] if 0 <= i < plan.count else None
        total += source.length if source is not None else 0
        if total > limit:
            return n
    return len(chunks)


def profile_document(chunk_size: int, chunks: list[int]) -> bytes:
    return json.dumps(
        {"file": mt.MEMORY_FILE, "chunkSize": chunk_size, "chunks": chunks}, separators=(",", ":")
    ).encode()


def parse_profile(data: bytes, chunk_size: int, count: int) -> list[int]:
    """The chunk indexes of a profile document for an image of ``count`` chunks of ``chunk_size``.
    Raises ValueError naming what is wrong."""
    obj = json.loads(data)
    if not isinstance(obj, dict) or obj.get("file") != mt.MEMORY_FILE:
        raise ValueError(f"not an access profile of {mt.MEMORY_FILE}")
    if obj.get("chunkSize") != chunk_size:
        raise ValueError(f"its chunk size {obj.get('chunkSize')!r} is not the image's {chunk_size}")
    chunks = obj.get("chunks")
    if not isinstance(chunks, list) or len(chunks) > min(count, MAX_PROFILE_CHUNKS):
        raise ValueError("its chunk list is missing or longer than the image")
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < count for i in chunks):
        raise ValueError(f"it lists a chunk index outside 0..{count - 1}")
    return list(dict.fromkeys(chunks))


def attach_profile(repo: RepositoryClient, head_digest: str, head_size: int, chunk_size: int, chunks: list[int]) -> str:
    """Attach ``chunks`` (first-read order) to the head layer; return the referrer's digest.
    Raises the HubError family (Forbidden without push access)."""
    return push_referrer(
        repo,
        subject_digest=head_digest,
        subject_size=head_size,
        artifact_type=ARTIFACT_TYPE,
        documents=[Document(ARTIFACT_TYPE, profile_document(chunk_size, chunks))],
        annotations={},
    )


def fetch_profile(repo: RepositoryClient, head_digest: str, chunk_size: int, count: int) -> tuple[list[int], str]:
    """The newest usable access profile of the head layer: ``(chunk indexes, note)``; the note says
    which profile was used or why none was (none attached, malformed, unreadable)."""
    try:
        found = repo.referrers(head_digest, ARTIFACT_TYPE)
    except HubError as e:
        return [], f"no access profile (listing referrers failed: {e})"
    note = "no access profile attached"
    for descriptor in reversed(found):
        digest = str(descriptor.get("digest", ""))
        try:
            documents = fetch_documents(repo, digest)
            return parse_profile(documents[0].data, chunk_size, count), f"access profile {digest}"
        except (HubError, ValueError, IndexError) as e:
            note = f"access profile {digest} ignored: {e}"
    return [], note
