"""A cpio "newc" archive writer for initramfs images, in pure Python.

Written here rather than shelling out to ``cpio`` so that device nodes (``/dev/console``) can be
added without root, and so that the output is byte-for-byte reproducible (fixed inode numbers,
uid/gid 0, mtime 0).
"""

from __future__ import annotations

import stat
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One archive member. ``data`` is the file content or, for a symlink, its target."""

    path: str
    mode: int
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)


def directory(path: str, perm: int = 0o755) -> Entry:
    return Entry(path, stat.S_IFDIR | perm)


def regular(path: str, data: bytes, perm: int = 0o644) -> Entry:
    return Entry(path, stat.S_IFREG | perm, data)


def symlink(path: str, target: str) -> Entry:
    return Entry(path, stat.S_IFLNK | 0o777, target.encode())


def char_device(path: str, major: int, minor: int, perm: int = 0o600) -> Entry:
    return Entry(path, stat.S_IFCHR | perm, rdev=(major, minor))


def write_newc(entries: list[Entry]) -> bytes:
    """Serialise ``entries`` (parents before children) plus the trailer into one archive."""
    out = bytearray()
    for ino, entry in enumerate(entries, start=1):
        _append(
            out,
            entry.path.lstrip("/"),
            entry.mode,
            entry.data,
            ino,
            entry.rdev,
            nlink=2 if stat.S_ISDIR(entry.mode) else 1,
        )
    _append(out, "TRAILER!!!", 0, b"", 0, (0, 0), nlink=1)
    return bytes(out)


def _append(out: bytearray, name: str, mode: int, data: bytes, ino: int, rdev: tuple[int, int], nlink: int) -> None:
    encoded = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1], len(encoded), 0)
    out += b"070701" + "".join(f"{value:08x}" for value in fields).encode()
    out += encoded
    out += b"\0" * (-len(out) % 4)
    out += data
    out += b"\0" * (-len(out) % 4)


def read_newc(data: bytes) -> list[Entry]:
    """Parse a newc archive back into entries (for inspection and tests). Raises ``ValueError``."""
    entries: list[Entry] = []
    pos = 0
    while True:
        if data[pos : pos + 6] != b"070701":
            raise ValueError(f"no newc header at offset {pos}")
        fields = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        pos = (pos + 110 + namesize + 3) & ~3
        body = data[pos : pos + size]
        pos = (pos + size + 3) & ~3
        if name == "TRAILER!!!":
            return entries
        entries.append(Entry(name, mode, body, (fields[9], fields[10])))
