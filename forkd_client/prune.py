"""``forkd prune``: remove what interrupted transfers left behind and records of files that are gone.

Never touches a snapshot. Removes (or with ``dry_run`` only lists):

- ``.staging/resume-*``: the staged files of interrupted pulls (what ``forkd pull`` would resume
  from) that no running pull holds;
- ``.staging/<pid>-*``: scratch directories of processes that are gone;
- ``.staging/lazy-*``: the control directories (log, state files) a detached lazy server left after a
  failure, once it is gone (a running server holds its directory's flock);
- the resumable push sessions recorded in ``transfers.json`` (``upload|…``, ``recipe|…``: the hub
  expires their upload sessions anyway; a later push starts those uploads over);
- rows of ``chunk-index.db`` and ``verified.db`` about files that no longer exist.

It works on a full disk: staged files go first (that frees space), and a record that cannot be rewritten for lack
of space is left as it was and named in the report.

Errors: OSError from the filesystem, sqlite3.Error from the local databases.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .diskspace import is_no_space
from .hub.localchunks import LocalChunkIndex
from .hub.state import TransferState
from .install import RESUME_PREFIX
from .lazy.serve import CONTROL_PREFIX
from .store import SnapshotStore

__all__ = ["PruneReport", "prune"]

RESUMABLE_TRANSFERS = ("upload|", "recipe|")


@dataclass
class PruneReport:
    dry_run: bool
    staging: list[str] = field(default_factory=list)
    """Directory names under ``.staging/`` removed (or that would be)."""
    bytes_freed: int = 0
    transfer_entries: list[str] = field(default_factory=list)
    chunk_index_rows: int = 0
    verified_rows: int = 0
    not_rewritten: list[str] = field(default_factory=list)
    """Records left as they were because the disk is full (rows of the SQLite records are skipped the same way,
    forkd_client.localdb)."""

    def to_obj(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "staging": self.staging,
            "bytes_freed": self.bytes_freed,
            "transfer_entries": self.transfer_entries,
            "chunk_index_rows": self.chunk_index_rows,
            "verified_rows": self.verified_rows,
            "not_rewritten": self.not_rewritten,
        }


def prune(store: SnapshotStore, *, dry_run: bool = False) -> PruneReport:
    """Remove leftovers of interrupted transfers and stale records (see the module docstring)."""
    report = PruneReport(dry_run)
    if store.staging_root.is_dir():
        for entry in sorted(os.scandir(store.staging_root), key=lambda e: e.name):
            path = Path(entry.path)
            if entry.name.startswith((RESUME_PREFIX, CONTROL_PREFIX)):
                if _take_unused(path, report, dry_run):
                    report.staging.append(entry.name)
            elif _left_by_dead_process(entry.name):
                report.bytes_freed += _allocated(path)
                report.staging.append(entry.name)
                if not dry_run:
                    shutil.rmtree(path, ignore_errors=True)
    # Files first (above): on a full disk they are what frees space; the records below need a little.
    try:
        report.transfer_entries = TransferState(store.root / "transfers.json").remove_prefixed(
            RESUMABLE_TRANSFERS, dry_run=dry_run
        )
    except OSError as e:
        if not is_no_space(e):
            raise
        report.not_rewritten.append("transfers.json")
    if (store.root / "chunk-index.db").exists():
        index = LocalChunkIndex(store.root / "chunk-index.db", store.verified)
        try:
            report.chunk_index_rows = index.forget_missing(dry_run=dry_run)
        finally:
            index.close()
    report.verified_rows = store.verified.forget_missing(dry_run=dry_run)
    if report.staging and not dry_run:
        store.note_change()  # partly held layers are gone: a node agent reports it
    return report


def _take_unused(path: Path, report: PruneReport, dry_run: bool) -> bool:
    """Remove a resumable directory no process holds (its flock); whether it was (or would be)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # a pull is using it now
    else:
        report.bytes_freed += _allocated(path)
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def _left_by_dead_process(name: str) -> bool:
    pid = name.split("-", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _allocated(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total
