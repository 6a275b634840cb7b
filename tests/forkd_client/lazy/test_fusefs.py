"""The lazy mount under each libfuse a host may have (a fresh Debian host has only libfuse 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from ctypes.util import find_library
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
MOUNT_AND_READ = """
import os, sys
from pathlib import Path
import mfusepy
from forkd_client.lazy.fusefs import LazyMount
from forkd_client.lazy.record import RecordingImage
image = RecordingImage(Path(sys.argv[1]), 65536)
mount = LazyMount(image, Path(sys.argv[2]))
with open(mount.path, "rb") as f:
    data = f.read()
mount.unmount()
print(mfusepy.fuse_version_major, len(data), data == Path(sys.argv[1]).read_bytes())
"""


def _libfuse3() -> str | None:
    name = find_library("fuse3")
    return name and next((str(p) for p in Path("/usr/lib").rglob(name) if p.exists()), name)


@pytest.mark.parametrize("library", ["default", "libfuse3"])
def test_a_mount_serves_the_file_and_prints_nothing(library, tmp_path):
    """libfuse 3.14 printed "Ignoring invalid max threads value 4294967295 > max (100000)." on every
    mount (into a user's terminal, during forkd fork --lazy) until max_idle_threads was given."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if library == "libfuse3":
        path = _libfuse3()
        if path is None:
            pytest.skip("libfuse 3 is not installed here")
        env["FUSE_LIBRARY_PATH"] = path
    (tmp_path / "image").write_bytes(os.urandom(300_000))
    done = subprocess.run(
        [sys.executable, "-c", MOUNT_AND_READ, str(tmp_path / "image"), str(tmp_path / "mnt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    version, size, same = done.stdout.split()
    assert size == "300000" and same == "True"
    if library == "libfuse3":
        assert version == "3"
    assert done.stderr == ""
