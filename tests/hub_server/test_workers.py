"""``serve --workers``: the port reservation and its failure (the running workers: tests/e2e/test_read_cache.py)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from hub_server.workers import port_socket
from tests.e2e.hubproc import forkd_hub


def test_workers_bind_the_same_port_and_a_free_port_is_fixed_once() -> None:
    reserved = port_socket("127.0.0.1", 0)
    port = reserved.getsockname()[1]
    worker = port_socket("127.0.0.1", port)
    try:
        assert port != 0 and worker.getsockname()[1] == port
    finally:
        worker.close()
        reserved.close()


@pytest.mark.e2e  # runs forkd-hub serve as a process (tests/tiers.py)
def test_a_port_in_use_is_refused_before_any_worker_starts(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match="in use"):
            port_socket("127.0.0.1", port).close()
        done = subprocess.run(
            forkd_hub("serve", "--workers", "2", "--port", str(port), "--data-dir", str(tmp_path / "hub")),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 1
    assert f"forkd-hub: error: cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "Traceback" not in done.stderr
