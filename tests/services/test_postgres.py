"""The throwaway PostgreSQL cluster does not outlive a killed test run: the next cluster made reaps it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.services.postgres import find_bin_dir, reap_orphans

pytestmark = [pytest.mark.slow, pytest.mark.skipif(find_bin_dir() is None, reason="PostgreSQL is not installed")]

ROOT = Path(__file__).resolve().parents[2]
OWNER = """
import sys, time
from tests.services.postgres import PostgresCluster
cluster = PostgresCluster()
cluster.start()
print(cluster.root, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return False


def test_a_cluster_whose_test_process_was_killed_is_reaped():
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        root = Path(owner.stdout.readline().strip())  # type: ignore[union-attr]
        postmaster = int((root / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
        assert _alive(postmaster)
        assert reap_orphans(root.parent) == 0  # its owner still runs: left alone
        assert _alive(postmaster)
    finally:
        owner.send_signal(signal.SIGKILL)  # no teardown runs: pg_ctl's server stays behind
        owner.wait()
    assert _alive(postmaster) and root.exists()
    assert reap_orphans(root.parent) >= 1
    deadline = time.monotonic() + 15
    while _alive(postmaster) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(postmaster)
    assert not root.exists()
