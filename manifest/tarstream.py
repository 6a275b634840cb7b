"""Minimal, bounded streaming readers for forkd packs: zstd frames and tar entries.

Why not ``tarfile`` and ``zstandard.stream_reader``: ``stream_reader`` returns short data with
no error on a truncated stream; ``tarfile`` buffers pax/GNU long-name bodies without limit and
misreads some GNU headers. These readers check every header field, bound every buffer and
report truncation as :class:`~manifest.forkd_pack.CorruptPack`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import BinaryIO

import zstandard

from manifest.forkd_pack import CorruptPack, PackTooLarge, UnsafePackEntry

BLOCK = 1 << 20
ZEROS = bytes(BLOCK)  # compared as bytes: bytes == memoryview is ~50x slower (no memcmp)
_TAR_BLOCK = 512
_MAX_PAX_BYTES = 64 << 10
_MAX_TRAILING_BYTES = 1 << 20  # zero padding after the tar end marker (tar pads to 10 KiB records)
# Bytes fed to zstd per call. zstd can expand ~32768x (RLE blocks), so 512 bytes of a
# hostile stream yields at most ~16 MiB: a zstd bomb cannot balloon our memory.
_ZSTD_FEED = 512
_OCTAL = re.compile(rb"[0-7]+")


@dataclass(frozen=True)
class TarEntry:
    name: str
    kind: bytes  # typeflag
    size: int
    linkname: str


class TarReader:
    """Minimal streaming tar reader: ustar/GNU headers, pax 'x'/'g' records, nothing else."""

    def __init__(self, stream: ZstdStream) -> None:
        self._stream = stream
        self._entry: TarEntry | None = None
        self._remaining = 0

    def next_entry(self) -> TarEntry | None:
        """Next entry, or None at the end-of-archive marker."""
        if self._entry is not None:  # skip what the caller left of the body, and its padding
            skip = self._remaining + (-self._entry.size % _TAR_BLOCK)
            while skip:
                skip -= len(self._read(min(skip, BLOCK)))
        self._entry, self._remaining, pax = None, 0, {}
        while True:
            block = self._stream.read(_TAR_BLOCK)
            if not block:
                raise CorruptPack("tar archive ends without its end-of-archive marker (truncated pack?)")
            if len(block) < _TAR_BLOCK:
                raise CorruptPack("tar archive is truncated inside a header")
            if block == ZEROS[:_TAR_BLOCK]:
                return None
            entry = _parse_header(block)
            if entry.kind not in (b"x", b"g"):
                break
            if entry.size > _MAX_PAX_BYTES:
                raise PackTooLarge(f"pax header of {entry.size} bytes (before {entry.name!r}) is over {_MAX_PAX_BYTES}")
            data = self._read(entry.size + (-entry.size % _TAR_BLOCK))[: entry.size]
            if entry.kind == b"x":
                pax = _parse_pax(data)
        if any(key.startswith("GNU.sparse") for key in pax):
            raise UnsafePackEntry(
                f"entry {pax.get('path', entry.name)!r} is a GNU sparse file; packs store files densely"
            )
        if "size" in pax:
            if not pax["size"].isdigit():
                raise CorruptPack(f"pax size {pax['size']!r} for {entry.name!r} is not a number")
            entry = replace(entry, size=int(pax["size"]))
        if "path" in pax:
            entry = replace(entry, name=pax["path"])
        self._entry, self._remaining = entry, entry.size
        return entry

    def read_body(self, n: int) -> bytes:
        """Exactly ``n`` more bytes of the current entry's body."""
        if n > self._remaining:
            raise ValueError("read past the end of a tar entry")
        data = self._read(n)
        self._remaining -= n
        return data

    def finish(self) -> None:
        """After the end marker: allow zero padding (bounded), then require a complete zstd stream."""
        trailing = 0
        while chunk := self._stream.read(BLOCK):
            trailing += len(chunk)
            if trailing > _MAX_TRAILING_BYTES or chunk.count(0) != len(chunk):
                raise CorruptPack("unexpected data after the end of the tar archive")

    def _read(self, n: int) -> bytes:
        data = self._stream.read(n)
        if len(data) < n:
            where = f"inside entry {self._entry.name!r}" if self._entry else "inside a header"
            raise CorruptPack(f"tar archive is truncated {where}")
        return data


def _parse_header(block: bytes) -> TarEntry:
    expected = _tar_number(block[148:156], "checksum")
    if expected != sum(block[:148]) + 8 * 32 + sum(block[156:]):
        raise CorruptPack("tar header checksum mismatch (corrupt tar archive)")
    name = _tar_string(block[0:100])
    if block[257:263] == b"ustar\0":  # POSIX ustar only; GNU headers keep atime/ctime in that space
        prefix = _tar_string(block[345:500])
        name = f"{prefix}/{name}" if prefix else name
    return TarEntry(name, block[156:157], _tar_number(block[124:136], f"size of {name!r}"), _tar_string(block[157:257]))


def _tar_number(field: bytes, what: str) -> int:
    if field[0] & 0x80:  # GNU base-256 (sizes >= 8 GiB); 0xff would be negative
        if field[0] == 0xFF:
            raise CorruptPack(f"tar header {what} is negative")
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits:
        return 0
    if not _OCTAL.fullmatch(digits):
        raise CorruptPack(f"tar header {what} is not an octal number: {field!r}")
    return int(digits, 8)


def _tar_string(field: bytes) -> str:
    raw = field.split(b"\0", 1)[0]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafePackEntry(f"entry name {raw!r} is not valid UTF-8") from None


def _parse_pax(data: bytes) -> dict[str, str]:
    """Parse ``"<len> <key>=<value>\\n"`` records."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        length = data[pos:space]
        if space < 0 or not length.isdigit() or int(length) <= space - pos or pos + int(length) > len(data):
            raise CorruptPack("malformed pax extended header")
        record = data[space + 1 : pos + int(length)]
        if not record.endswith(b"\n") or b"=" not in record:
            raise CorruptPack("malformed pax extended header record")
        key, _, value = record[:-1].partition(b"=")
        try:
            records[key.decode("utf-8")] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise UnsafePackEntry(f"pax record {record!r} is not valid UTF-8") from None
        pos += int(length)
    return records


class ZstdStream:
    """Bounded-memory zstd decoder that detects truncation.

    python-zstandard's ``stream_reader`` returns short data without an error when a frame
    is cut off, and ``decompressobj`` returns all output of its input at once; feeding
    small pieces to ``decompressobj`` and checking ``eof`` gives both bounds and truncation
    detection. Concatenated frames are accepted, as forkd's decoder does.
    """

    def __init__(self, source: BinaryIO) -> None:
        self._source = source
        self._pending = memoryview(b"")  # compressed bytes not yet fed
        self._decoder = zstandard.ZstdDecompressor().decompressobj()
        self._in_frame = False
        self._out = memoryview(b"")

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end of the stream)."""
        parts, want = [], n
        while want and self._fill():
            piece = self._out[:want]
            self._out = self._out[len(piece) :]
            parts.append(piece)
            want -= len(piece)
        return b"".join(parts)

    def _fill(self) -> bool:
        while not self._out:
            if not self._pending:
                compressed = self._source.read(BLOCK)
                if not compressed:
                    if self._in_frame:
                        raise CorruptPack("zstd stream is truncated: its last frame is incomplete")
                    return False
                self._pending = memoryview(compressed)
            piece, self._pending = self._pending[:_ZSTD_FEED], self._pending[_ZSTD_FEED:]
            try:
                self._out = memoryview(self._decoder.decompress(piece))
            except zstandard.ZstdError as e:
                raise CorruptPack(f"corrupt zstd stream: {e}") from None
            self._in_frame = True
            if self._decoder.eof:  # frame complete; what follows must be another frame
                rest = bytes(self._decoder.unused_data) + bytes(self._pending)
                self._pending = memoryview(rest)
                self._decoder = zstandard.ZstdDecompressor().decompressobj()
                self._in_frame = False
        return True
