"""Moving and merging guest memory files, keeping their holes.

Guest memory files are mostly holes; a copy must keep them holes, or a 4 GiB guest that touched
200 MiB costs 4 GiB of disk. Copies go through the project's one ``clone_file``
(:mod:`manifest.fileops`: ``FICLONE`` where the filesystem shares extents, else only the data
regions with ``copy_file_range``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from manifest.fileops import clone_file, copy_data_ranges

__all__ = ["merge_sparse", "move_file"]


def move_file(src: Path, dst: Path) -> str:
    """Rename ``src`` to ``dst``, or clone + unlink across filesystems; return how
    (``"rename"``, or the :class:`manifest.fileops.CloneMethod` of the copy). Raises ``OSError``."""
    try:
        os.replace(src, dst)
        return "rename"
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    how = clone_file(src, dst, replace=True)
    os.unlink(src)
    return how


def merge_sparse(diff: Path, target: Path) -> int:
    """Write every data region of sparse file ``diff`` into ``target`` at the same offsets.

    This applies a Firecracker "Diff" memory snapshot (dirty pages at their offsets, holes
    elsewhere) onto a clone of the parent's memory. Returns the bytes written. Raises ``OSError``.
    """
    with open(diff, "rb") as fin, open(target, "r+b") as fout:
        return copy_data_ranges(fin.fileno(), fout.fileno())
