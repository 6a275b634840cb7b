"""Small persistent state that makes transfers resumable and repeat pushes cheap.

``<store root>/transfers.json`` maps keys to strings: upload session locations
(``upload|hub|repo|blob digest``) so a killed push continues its upload where the hub's
committed offset is, and pushed layers (``pushed|hub|repo|fingerprint``) so pushing an
unchanged link again costs one HEAD. Written atomically (temp + rename) under a lock.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from manifest.fileops import write_atomically


class TransferState:
    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _locked(self) -> Iterator[dict[str, str]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                data = json.loads(self.path.read_text())
                if not isinstance(data, dict):
                    data = {}
            except (FileNotFoundError, ValueError):
                data = {}
            before = dict(data)
            yield data
            if data != before:
                write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True), perms=0o600)
        finally:
            os.close(fd)

    def get(self, key: str) -> str | None:
        with self._locked() as data:
            value = data.get(key)
            return value if isinstance(value, str) else None

    def set(self, key: str, value: str) -> None:
        with self._locked() as data:
            data[key] = value

    def delete(self, key: str) -> None:
        with self._locked() as data:
            data.pop(key, None)

    def remove_prefixed(self, prefixes: tuple[str, ...], *, dry_run: bool = False) -> list[str]:
        """Remove (or with ``dry_run`` only list) the keys starting with one of ``prefixes``; return them sorted."""
        with self._locked() as data:
            keys = sorted(k for k in data if k.startswith(prefixes))
            if not dry_run:
                for key in keys:
                    del data[key]
            return keys
