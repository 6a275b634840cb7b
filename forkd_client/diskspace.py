"""A full disk, said plainly: which filesystem, what was being written, and what to free.

Every command that meets a full disk (a file write's ``ENOSPC``, SQLite's "database or disk is full",
or the "disk I/O error" SQLite reports when it cannot grow a database's WAL index) says
``no space left on <mount point>`` and what would free space there: the leftovers ``forkd prune``
removes (with their size, when they are in the store) and the snapshots ``forkd rmi`` removes.

Raises nothing itself: :func:`no_space` builds the :class:`~forkd_client.errors.NoSpace` error a caller raises.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from clikit.units import human_size

from .errors import NoSpace

__all__ = ["FULL_MARGIN", "is_full", "is_no_space", "mount_point", "no_space", "no_space_message"]

#: Below this much free space a filesystem counts as full (SQLite needs a few pages to grow a WAL).
FULL_MARGIN = 1 << 20


def mount_point(path: str | os.PathLike[str]) -> Path:
    """The mount point of the filesystem holding ``path`` (or its nearest existing parent)."""
    here = Path(os.path.abspath(path))
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        device = here.stat().st_dev
    except OSError:
        return here
    while here != here.parent:
        try:
            if here.parent.stat().st_dev != device:
                break
        except OSError:
            break
        here = here.parent
    return here


def is_full(path: str | os.PathLike[str], margin: int = FULL_MARGIN) -> bool:
    """Whether the filesystem holding ``path`` has less than ``margin`` bytes free for us."""
    try:
        st = os.statvfs(mount_point(path))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin


def is_no_space(error: BaseException, path: str | os.PathLike[str] | None = None) -> bool:
    """Whether ``error`` (an OSError or a sqlite3 error about ``path``) means the disk is full."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    name = getattr(error, "sqlite_errorname", "") or ""
    if name == "SQLITE_FULL" or "database or disk is full" in str(error):
        return True
    # SQLite says "disk I/O error" when it cannot extend the -shm or -wal file on a full disk
    return path is not None and (name.startswith("SQLITE_IOERR") or "disk I/O error" in str(error)) and is_full(path)


def _staging_bytes(store_root: Path) -> int:
    total = 0
    for root, _, files in os.walk(store_root / ".staging"):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def no_space_message(path: str | os.PathLike[str] | None, store_root: str | os.PathLike[str] | None) -> str:
    """``no space left on MOUNT (writing PATH): free space there: …`` for ``path`` (or the store)."""
    where = Path(path) if path is not None else (Path(store_root) if store_root is not None else Path.cwd())
    mount = mount_point(where)
    writing = f" (writing {path})" if path is not None else ""
    remedies = []
    if store_root is not None and mount_point(store_root) == mount:
        leftovers = _staging_bytes(Path(store_root))
        prune = "'forkd prune' removes what interrupted pulls and pushes left"
        remedies.append(f"{prune} ({human_size(leftovers)} here)" if leftovers else prune)
        remedies.append("'forkd rmi TAG' removes a snapshot ('forkd images' shows what each one frees)")
    remedies.append(f"or remove other files on {mount}")
    return (
        f"no space left on {mount}{writing}: free space there: " + ", ".join(remedies) + "; then run the command again"
    )


def no_space(path: str | os.PathLike[str] | None, store_root: str | os.PathLike[str] | None) -> NoSpace:
    """The error to raise for a full disk met writing ``path`` (see :func:`no_space_message`)."""
    return NoSpace(no_space_message(path, store_root), path=None if path is None else str(path))
