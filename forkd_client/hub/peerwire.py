"""The wire form of fleet peers' chunk exchange (docs/mirrors.md, "A fleet with peers"), shared by the peer
server (:mod:`forkd_client.node.peers`) and the pull's peer source (:mod:`.peers`).

Request: ``POST /peer/v1/chunks`` with a JSON array of chunk digests (``blake3:<64 hex>``; at most
:data:`MAX_DIGESTS`, a body of at most :data:`MAX_REQUEST_BYTES`) and ``Authorization: ForkdPeer t=<unix
seconds>,mac=<hex>`` (:func:`authorization`): an HMAC-SHA256, keyed with the fleet token, of the time and of
the **peer URL the request goes to** (its audience: the URL the peer reported, as the hub hands it out). The
token itself never travels: a peer URL a host reports (with its node token) learns a proof that opens only
that URL, within :data:`MAX_SKEW_S` seconds either side of its clock (:func:`authorized`).

Response (``200``, ``Content-Type: application/vnd.forkd.peer-chunks.v1``, with ``Content-Length``): the
magic :data:`MAGIC`, then one record per requested digest, **in the request's order**: a 4-byte big-endian
length and that many bytes of the raw (uncompressed) chunk, or the length :data:`MISSING` and no bytes when
the peer does not hold it (or the response reached :data:`MAX_RESPONSE_BYTES`). Nothing in the stream names a
digest: the reader knows which digest each record answers, and checks every record's length and blake3
against it, so a record is verified alone (the hub's check of a frame, :func:`manifest.assemble.decompress_chunk`,
on uncompressed bytes: the same blake3 of the chunk's exact bytes).

Errors of :func:`parse_records`: :class:`PeerWireError` (bad magic, a record cut short, bytes left over,
a record longer than the chunk it answers).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
from collections.abc import Iterator, Sequence

import blake3

__all__ = [
    "CONTENT_TYPE",
    "DIGEST",
    "MAGIC",
    "MAX_DIGESTS",
    "MAX_REQUEST_BYTES",
    "MAX_RESPONSE_BYTES",
    "MISSING",
    "PATH",
    "PEER_URL",
    "PeerWireError",
    "authorization",
    "authorized",
    "chunk_matches",
    "encode_record",
    "parse_records",
]

PATH = "/peer/v1/chunks"
CONTENT_TYPE = "application/vnd.forkd.peer-chunks.v1"
MAGIC = b"FKPEER1\n"
MISSING = 0xFFFFFFFF
#: Digests one request may name, and the body that names them (~75 bytes a digest).
MAX_DIGESTS = 256
MAX_REQUEST_BYTES = 64 << 10
#: Chunk bytes one response carries at most; records past it are sent as missing.
MAX_RESPONSE_BYTES = 8 << 20
DIGEST = re.compile(r"blake3:[0-9a-f]{64}")
#: The form of a peer URL the hub accepts as the ``peerUrl`` fact (hub_server/registry/fleet/reports.py checks
#: the same): http(s), a host name, IPv4 or [IPv6], an optional port and path; no credentials, query or fragment.
PEER_URL = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?")
MAX_PEER_URL = 256
_LEN = struct.Struct(">I")


#: How far a request's time may be from the peer's clock (fleet hosts keep time with NTP).
MAX_SKEW_S = 120
AUTH_SCHEME = "ForkdPeer"
_AUTH = re.compile(AUTH_SCHEME + r" t=([0-9]{1,12}),mac=([0-9a-f]{64})")


def _mac(token: bytes, audience: str, t: int) -> str:
    return hmac.new(token, f"forkd-peer-v1\n{t}\n{audience.rstrip('/')}".encode(), hashlib.sha256).hexdigest()


def authorization(token: str, audience: str, now: float) -> str:
    """The ``Authorization`` value of a request to the peer at URL ``audience`` at time ``now`` (module docstring)."""
    t = int(now)
    return f"{AUTH_SCHEME} t={t},mac={_mac(token.encode(), audience, t)}"


def authorized(header: str, token: bytes, audience: str, now: float) -> bool:
    """Whether ``header`` proves the fleet ``token`` for this peer (``audience``: its own URL) near ``now``;
    the MAC compared in constant time."""
    match = _AUTH.fullmatch(header.strip())
    if match is None:
        return False
    t = int(match.group(1))
    if abs(now - t) > MAX_SKEW_S:
        return False
    return hmac.compare_digest(match.group(2), _mac(token, audience, t))


class PeerWireError(ValueError):
    """A peer's response does not follow the framing (module docstring)."""


def encode_record(chunk: bytes | None) -> bytes:
    """One record: the chunk's length and bytes, or MISSING."""
    return _LEN.pack(MISSING) if chunk is None else _LEN.pack(len(chunk)) + chunk


def chunk_matches(data: bytes | memoryview, digest: str) -> bool:
    """Whether ``data`` are the exact bytes of the chunk ``digest`` names (blake3, as every chunk digest)."""
    return digest.startswith("blake3:") and "blake3:" + blake3.blake3(data).hexdigest() == digest


def parse_records(body: bytes | bytearray, lengths: Sequence[int]) -> Iterator[memoryview | None]:
    """The records of ``body``, one per requested chunk of the given ``lengths``, in order (None: missing).
    The framing is checked as it goes (a record longer than its chunk is refused before it is read), and
    bytes after the last record are an error. Verifying each chunk's digest is the caller's.
    Raises PeerWireError."""
    view = memoryview(body)
    if bytes(view[: len(MAGIC)]) != MAGIC:
        raise PeerWireError("the response does not start with the peer framing's magic")
    at = len(MAGIC)
    for i, length in enumerate(lengths):
        if at + 4 > len(view):
            raise PeerWireError(f"the response ends before record {i} of {len(lengths)}")
        (n,) = _LEN.unpack_from(view, at)
        at += 4
        if n == MISSING:
            yield None
            continue
        if n != length:
            raise PeerWireError(f"record {i} holds {n} bytes, the chunk is {length}")
        if at + n > len(view):
            raise PeerWireError(f"record {i} is cut short ({len(view) - at} of {n} bytes)")
        yield view[at : at + n]
        at += n
    if at != len(view):
        raise PeerWireError(f"{len(view) - at} bytes follow the last record")
