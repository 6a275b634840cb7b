"""The audit export as a file: hash-chained JSON lines, appended under a lock, checked line by line.

Each line is one event's fields plus ``prev``, the SHA-256 of the line before it (``"0" * 64`` for the
first), serialized canonically (:func:`export_line`: sorted keys, no spaces), so the same events make the
same bytes on every replica and the database can hold each line's hash (``hub_server/audit.py``). Editing,
removing or reordering lines breaks the chain and :func:`verify_jsonl` says where.

:func:`append_missing` is how every writer extends a file: under an exclusive ``flock`` it reads the last
complete line, asks the caller what follows it, and appends that with ``O_APPEND`` (a line torn by a crash is
left as it is and the next line starts fresh; :func:`verify_jsonl` flags it).

Errors: :class:`AuditChainBroken` (a ``ValueError``), ``OSError``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "GENESIS",
    "AuditChainBroken",
    "append_missing",
    "audit_record",
    "export_line",
    "line_hash",
    "verify_jsonl",
]

GENESIS = "0" * 64
_TAIL_BLOCK = 4096


class AuditChainBroken(ValueError):
    """The JSONL export was altered: ``line`` (1-based) does not follow the one before it."""

    def __init__(self, path: Path | None, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        super().__init__(f"{path or 'the audit chain'}: line {line}: {reason}")


def export_line(record: dict[str, Any], prev: str) -> bytes:
    """The export's line for an event's fields ``record`` chained onto the line hashing to ``prev``."""
    return json.dumps({**record, "prev": prev}, sort_keys=True, separators=(",", ":")).encode()


def line_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()


def audit_record(line: bytes) -> dict[str, Any]:
    """The event of one export line (without its ``prev``). Raises: ValueError."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    record.pop("prev", None)
    return record


def _last_complete_line(fd: int) -> tuple[bytes | None, bool]:
    """The last newline-terminated line of the file open at ``fd`` (without its newline), and whether a torn
    line (no newline) follows it."""
    end = os.lseek(fd, 0, os.SEEK_END)
    if end == 0:
        return None, False
    torn = os.pread(fd, 1, end - 1) != b"\n"
    tail = b""
    position = end
    while position > 0:
        step = min(_TAIL_BLOCK, position)
        position -= step
        tail = os.pread(fd, step, position) + tail
        if tail.count(b"\n") >= 2 or (position == 0 and b"\n" in tail):
            break
    cut = tail.rfind(b"\n")
    if cut == -1:  # only a torn line
        return None, True
    complete = tail[:cut]
    return complete.rsplit(b"\n", 1)[-1], torn


def append_missing(path: Path, following: Callable[[bytes | None], list[bytes]]) -> int:
    """Append to ``path`` the lines ``following(last complete line or None)`` returns, atomically with respect
    to other writers; returns how many. ``following`` raises AuditChainBroken to refuse (nothing is written).

    Raises: AuditChainBroken, OSError.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        previous, torn = _last_complete_line(fd)
        lines = following(previous)
        if not lines:
            return 0
        data = b"".join(line + b"\n" for line in lines)
        if torn:  # a crash tore the last write: start on a fresh line (verify_jsonl flags the torn one)
            data = b"\n" + data
        written = 0
        while written < len(data):  # os.write may be partial; O_APPEND keeps each at the end
            written += os.write(fd, data[written:])
        return len(lines)
    finally:
        os.close(fd)  # also releases the lock


def verify_jsonl(path: Path) -> int:
    """Check the hash chain of an audit export; return how many events it holds.

    Raises:
        AuditChainBroken: a line is not JSON, lacks ``prev``, or its ``prev`` is not the hash
            of the line before it (a line was edited, removed, inserted or reordered).
        FileNotFoundError: ``path`` does not exist.
    """
    expected = GENESIS
    count = 0
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            line = raw.rstrip(b"\n")
            try:
                prev = json.loads(line)["prev"]
            except (ValueError, KeyError, TypeError) as e:
                raise AuditChainBroken(path, number, f"not an audit record ({e})") from e
            if prev != expected:
                raise AuditChainBroken(path, number, "does not chain to the previous line")
            expected = line_hash(line)
            count = number
    return count
