"""The rootfs cache: built images and Debian tarballs, keyed by their inputs, published atomically.

``$FORKD_ROOTFS_CACHE``, else ``$XDG_CACHE_HOME/forkd/rootfs``, else ``~/.cache/forkd/rootfs``::

    images/<key>/rootfs.ext4   a built image (sparse)
    images/<key>/built.json    what build_rootfs returned, plus the file's size, inode and mtime
    debian/<key>.tar           an mmdebstrap tarball (key: the Debian inputs, debian.DebianInputs.key)
    locks/<key>.lock           flock'ed while a key is being built (a second builder waits, then hits)
    tmp/<random>/              one build's work directory (blobs, tree, staging), flock'ed by its owner;
                               one left by a killed build is removed by a later build

A build writes everything in its work directory and publishes with one ``rename`` (a whole directory for an
image, the tarball for Debian), so a reader sees a complete entry or none. A hit is checked cheaply: the file
must still have the size, inode and mtime recorded when it was published (a file changed or replaced since
is rebuilt, never used). Nothing is evicted automatically; ``rm -rf`` of the directory is always safe when
no build runs.

Errors: OSError for host facts (ENOSPC, permissions).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from manifest.fileops import write_atomically

CACHE_ENV = "FORKD_ROOTFS_CACHE"
IMAGE_FILE = "rootfs.ext4"
RECORD_FILE = "built.json"
STALE_AFTER = 60.0


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """Where the rootfs cache lives for the given environment (default ``os.environ``)."""
    env = os.environ if env is None else env
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forkd" / "rootfs"


@contextlib.contextmanager
def _flock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


class RootfsCache:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_root()

    def _dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the build lock of ``key`` (waits for another builder of the same key)."""
        with _flock(self._dir("locks") / f"{key}.lock"):
            yield

    @contextlib.contextmanager
    def work_dir(self) -> Iterator[Path]:
        """A fresh private work directory, removed with everything in it when the block ends."""
        tmp = self._dir("tmp")
        self._sweep(tmp)
        work = tmp / secrets.token_hex(8)
        work.mkdir(mode=0o700)
        try:
            with _flock(work / ".lock"):
                yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _sweep(self, tmp: Path) -> None:
        """Remove work directories whose builder is gone: their lock is free, and they are older than
        :data:`STALE_AFTER` seconds (a new one is locked a moment after it is made)."""
        now = time.time()
        for old in tmp.iterdir():
            lock = old / ".lock"
            try:
                if now - old.stat().st_mtime < STALE_AFTER or not lock.exists():
                    continue
            except FileNotFoundError:
                continue
            with _flock(lock, blocking=False) as free:
                if free:
                    shutil.rmtree(old, ignore_errors=True)

    # --- built images -------------------------------------------------------------------------------

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The record of a valid entry for ``key`` (``path`` set to its image), or None."""
        entry = self.root / "images" / key
        try:
            record = json.loads((entry / RECORD_FILE).read_text())
            st = os.stat(entry / IMAGE_FILE)
        except (OSError, ValueError):
            return None
        stamp = record.get("file", {}) if isinstance(record, dict) else {}
        if stamp != {"size": st.st_size, "inode": st.st_ino, "mtime_ns": st.st_mtime_ns} or record.get("key") != key:
            return None
        record["path"] = str(entry / IMAGE_FILE)
        return record

    def publish(self, key: str, staged: Path, record: dict[str, Any]) -> Path:
        """Publish ``staged`` (a directory holding ``rootfs.ext4``) as the entry of ``key``; returns the image path.

        ``record`` is stored with the file's stamp. An older invalid entry is removed first. Hold :meth:`lock`.
        """
        st = os.stat(staged / IMAGE_FILE)
        record = {**record, "key": key, "file": {"size": st.st_size, "inode": st.st_ino, "mtime_ns": st.st_mtime_ns}}
        write_atomically(staged / RECORD_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n", perms=0o644)
        entry = self._dir("images") / key
        if entry.exists():
            shutil.rmtree(entry)
        os.rename(staged, entry)
        return entry / IMAGE_FILE

    # --- Debian tarballs ----------------------------------------------------------------------------

    def debian_tarball(self, key: str) -> Path:
        return self._dir("debian") / f"{key}.tar"

    def publish_file(self, written: Path, target: Path) -> None:
        """Move a finished file another process wrote (mmdebstrap's tarball) into place."""
        os.rename(written, target)
