"""Content digests: ``algorithm:hex`` strings, streaming hashers, verification.

Every object forkd-hub stores or moves is named by the digest of its exact bytes.
A digest string always carries its algorithm: ``blake3:<64 hex>`` (the default,
~7 GiB/s per core) or ``sha256:<64 hex>`` (what forkd and most OCI tools speak).
Hex is lowercase; anything else is rejected rather than normalised, so one digest
has exactly one spelling.

Errors: :class:`~manifest.errors.InvalidDigest` for malformed strings,
:class:`~manifest.errors.DigestMismatch` from the ``verify_*`` helpers.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import blake3

from .errors import DigestMismatch, InvalidDigest
from .fileops import data_ranges

DEFAULT_ALGORITHM = "blake3"
ALGORITHMS = ("blake3", "sha256", "sha512")
#: Hex characters after ``algorithm:`` (sha512 is accepted for OCI content: distribution-spec 1.1).
_HEX_LENGTH = {"blake3": 64, "sha256": 64, "sha512": 128}
_HEX = re.compile(r"[0-9a-f]+")
_READ_SIZE = 8 << 20
#: Bytes of a file mapped at once by ``digest_file(mapped=True)`` (a multiple of any page size).
_MAP_WINDOW = 64 << 20
#: Bytes of zeros hashed at once for a hole by ``digest_file(mapped=True)``.
_ZEROS_SIZE = 16 << 20


@dataclass(frozen=True, slots=True)
class Digest:
    """A parsed digest. ``str(d)`` gives the canonical ``algorithm:hex`` form."""

    algorithm: str
    hex: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hex}"

    @classmethod
    def parse(cls, text: str) -> Digest:
        """Parse ``algorithm:hex``. Raises InvalidDigest naming the bad string."""
        if not isinstance(text, str):
            raise InvalidDigest(f"digest must be a string, got {type(text).__name__}")
        algorithm, sep, hexpart = text.partition(":")
        if not sep:
            raise InvalidDigest(f"digest {text[:80]!r} has no algorithm prefix (want 'blake3:<hex>')")
        if algorithm not in ALGORITHMS:
            raise InvalidDigest(
                f"digest {text[:80]!r} uses unsupported algorithm {algorithm!r} (supported: {', '.join(ALGORITHMS)})"
            )
        if len(hexpart) != _HEX_LENGTH[algorithm] or not _HEX.fullmatch(hexpart):
            raise InvalidDigest(
                f"digest {text[:80]!r} must have {_HEX_LENGTH[algorithm]} lowercase hex characters after '{algorithm}:'"
            )
        return cls(algorithm, hexpart)


def parse_digest(text: str) -> Digest:
    """Parse and validate a digest string. Raises InvalidDigest."""
    return Digest.parse(text)


def is_digest(text: object) -> bool:
    """True when ``text`` is a valid digest string."""
    try:
        Digest.parse(text)  # type: ignore[arg-type]
    except InvalidDigest:
        return False
    return True


class _HashObject(Protocol):
    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...
    def hexdigest(self) -> str: ...


class Hasher:
    """A streaming hasher that yields a :class:`Digest`.

    ``Hasher("blake3")`` uses blake3's multithreaded mode for large updates, which
    releases the GIL, so hashing in a worker thread does not stall an event loop.
    """

    def __init__(self, algorithm: str = DEFAULT_ALGORITHM) -> None:
        if algorithm == "blake3":
            self._h: _HashObject = blake3.blake3(max_threads=blake3.blake3.AUTO)
        elif algorithm == "sha256":
            self._h = hashlib.sha256()
        elif algorithm == "sha512":
            self._h = hashlib.sha512()
        else:
            raise InvalidDigest(f"unsupported digest algorithm {algorithm!r} (supported: {', '.join(ALGORITHMS)})")
        self.algorithm = algorithm
        self.size = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._h.update(data)
        self.size += len(data)

    def digest(self) -> Digest:
        return Digest(self.algorithm, self._h.hexdigest())


def digest_bytes(data: bytes | bytearray | memoryview, algorithm: str = DEFAULT_ALGORITHM) -> Digest:
    """Digest of an in-memory byte string."""
    if algorithm == "blake3":
        return Digest("blake3", blake3.blake3(data).hexdigest())
    h = Hasher(algorithm)
    h.update(data)
    return h.digest()


def _blake3_mapped(path: str | os.PathLike[str]) -> Digest:
    """blake3 of a file on all cores: its data mapped one window at a time, its holes hashed
    from a buffer of zeros (never read: no page cache spent on them). Raises OSError."""
    b3 = blake3.blake3(max_threads=blake3.blake3.AUTO)
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        position = 0
        for start, length in data_ranges(fd, size):
            _update_zeros(b3, start - position)
            _update_mapped(b3, fd, start, length)
            position = start + length
        _update_zeros(b3, size - position)
    return Digest("blake3", b3.hexdigest())


def _update_mapped(b3: blake3.blake3, fd: int, start: int, length: int) -> None:
    """Hash ``length`` bytes of ``fd`` at ``start``, mapped at most ``_MAP_WINDOW`` bytes at a time."""
    end = start + length
    while start < end:
        base = start - start % mmap.ALLOCATIONGRANULARITY
        span = min(end, base + _MAP_WINDOW) - base
        with mmap.mmap(fd, span, offset=base, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
            b3.update(view[start - base :])
        start = base + span


def _update_zeros(b3: blake3.blake3, length: int) -> None:
    zeros = _zeros()
    while length > 0:
        b3.update(zeros[: min(length, _ZEROS_SIZE)])
        length -= _ZEROS_SIZE


@functools.cache
def _zeros() -> memoryview:
    return memoryview(bytes(_ZEROS_SIZE))


def digest_file(
    path: str | os.PathLike[str], algorithms: tuple[str, ...] = (DEFAULT_ALGORITHM,), *, mapped: bool = False
) -> dict[str, Digest]:
    """Digest a whole file with each algorithm in one read pass.

    ``mapped`` (blake3 alone) maps the file instead of reading it and hashes on all cores: no
    copy into a buffer, up to ~1.5x faster. Only for files nobody else can shrink meanwhile (the
    caller's own staged files): a mapping past a file's new end faults (SIGBUS), it does not raise.
    It maps one window of ``_MAP_WINDOW`` bytes of data at a time, so the pages it touches leave
    the process's RSS as it goes (one mapping of a 16 GiB memory.bin held 16 GiB resident), and
    hashes holes (``SEEK_HOLE``) as zeros without reading them.

    With several algorithms, the others hash each block on a second thread while blake3 hashes
    it here (both release the GIL), so blake3 + sha256 costs about sha256 alone.
    Returns ``{algorithm: Digest}``. Raises OSError if the file cannot be read.
    """
    if mapped and tuple(algorithms) == ("blake3",):
        return {"blake3": _blake3_mapped(path)}
    hashers = [Hasher(a) for a in algorithms]
    if len(hashers) == 1:
        with open(path, "rb", buffering=0) as f:
            # no bigger than the file (+1: its end is seen in the first read): zeroing an 8 MiB
            # buffer costs ~2.5 ms, more than hashing a vmstate (a pull digests one per link)
            buf = bytearray(min(_READ_SIZE, os.fstat(f.fileno()).st_size + 1))
            view = memoryview(buf)
            while n := f.readinto(buf):
                hashers[0].update(view[:n])
        return {hashers[0].algorithm: hashers[0].digest()}
    here, others = hashers[0], hashers[1:]

    def update_others(block: bytes) -> None:
        for h in others:
            h.update(block)

    with open(path, "rb", buffering=0) as f, ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        while block := f.read(_READ_SIZE):
            if pending is not None:
                pending.result()
            pending = pool.submit(update_others, block)
            here.update(block)
        if pending is not None:
            pending.result()
    return {h.algorithm: h.digest() for h in hashers}


def verify_bytes(data: bytes | bytearray | memoryview, expected: str | Digest, what: str = "content") -> None:
    """Raise DigestMismatch unless ``data`` hashes to ``expected`` (with its algorithm)."""
    want = expected if isinstance(expected, Digest) else Digest.parse(expected)
    got = digest_bytes(data, want.algorithm)
    if got != want:
        raise DigestMismatch(what, str(want), str(got))


def verify_file(path: str | os.PathLike[str], expected: str | Digest) -> None:
    """Raise DigestMismatch unless the file hashes to ``expected``."""
    want = expected if isinstance(expected, Digest) else Digest.parse(expected)
    got = digest_file(path, (want.algorithm,))[want.algorithm]
    if got != want:
        raise DigestMismatch(str(Path(path)), str(want), str(got))
