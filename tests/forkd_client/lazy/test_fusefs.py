"""The FUSE binding's set-up (forkd_client/lazy/fusefs.py): which libfuse is loaded, and that
libfuse's own chatter never reaches the user's terminal. A real mount, in a fresh process (the
library is chosen once, at import)."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse") or os.geteuid() != 0, reason="needs /dev/fuse as root")

MOUNT_AND_REPORT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from forkd_client.lazy.fusefs import LazyMount, PendingImage, fuse_module
    mount = LazyMount(PendingImage(1 << 20), Path(sys.argv[1]))
    size = (Path(sys.argv[1]) / "memory.bin").stat().st_size
    mount.image.fail("test over")
    mount.unmount()
    print(json.dumps({"libfuse": fuse_module().fuse_version_major, "size": size}))
    """
)


def _mount_in_a_fresh_process(tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FUSE_LIBRARY_")} | env
    return subprocess.run(
        [sys.executable, "-c", MOUNT_AND_REPORT, str(tmp_path / "mnt")],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
    )


@pytest.mark.skipif(not ctypes.util.find_library("fuse3"), reason="libfuse 3 not installed")
def test_libfuse_3_is_loaded_where_installed_and_says_nothing_on_stderr(tmp_path):
    done = _mount_in_a_fresh_process(tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"libfuse": 3, "size": 1 << 20}
    # libfuse 3.14 prints "Ignoring invalid max threads value 4294967295 > max (100000)." on every mount
    assert done.stderr == ""


@pytest.mark.skipif(not ctypes.util.find_library("fuse"), reason="libfuse 2 not installed")
def test_a_library_the_user_names_wins(tmp_path):
    done = _mount_in_a_fresh_process(tmp_path, FUSE_LIBRARY_NAME="fuse")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["libfuse"] == 2
