"""forkd_client.diskspace: what counts as a full disk, and where."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from forkd_client.diskspace import is_full, is_no_space, mount_point, no_space
from forkd_client.errors import ClientError, NoSpace


def test_mount_point_of_a_path_that_does_not_exist_yet(tmp_path: Path) -> None:
    assert mount_point(tmp_path / "a" / "b") == mount_point(tmp_path)
    assert mount_point("/") == Path("/")


def test_what_means_a_full_disk(tmp_path: Path) -> None:
    assert is_no_space(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_no_space(OSError(errno.EACCES, "Permission denied"))
    full = sqlite3.OperationalError("database or disk is full")
    assert is_no_space(full)
    io = sqlite3.OperationalError("disk I/O error")
    assert not is_full(tmp_path) and not is_no_space(io, tmp_path)  # an I/O error on a disk with room is not "full"


def test_no_space_is_a_client_error_and_an_oserror(tmp_path: Path) -> None:
    error = no_space(tmp_path / "x", None)
    assert isinstance(error, NoSpace) and isinstance(error, ClientError) and isinstance(error, OSError)
    assert error.errno == errno.ENOSPC and str(error).startswith(f"no space left on {mount_point(tmp_path)}")
    assert "forkd prune" not in str(error)  # not in a store: only "remove other files"
