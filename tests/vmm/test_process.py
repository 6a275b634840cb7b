"""VMM process bookkeeping: spawn, reap, leak tracking, log tails, long socket paths."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from vmm import process
from vmm.unixsock import connect_unix


def test_stop_kills_and_reaps(tmp_path: Path) -> None:
    proc = process.spawn(["sleep", "60"], tmp_path, tmp_path / "log")
    assert proc.pid in process.live_pids()
    process.stop(proc)
    assert proc.returncode is not None and proc.pid not in process.live_pids()
    stat = Path(f"/proc/{proc.pid}/stat")
    assert not stat.exists() or stat.read_text().split()[2] != "Z", "left a zombie"


def test_log_tail_returns_the_end(tmp_path: Path) -> None:
    proc = process.spawn(["sh", "-c", "seq 1 5000; echo last >&2"], tmp_path, tmp_path / "log")
    proc.wait()
    process.stop(proc)
    tail = process.log_tail(tmp_path / "log", 20)
    assert tail.endswith("last") and len(tail) <= 20
    assert process.log_tail(tmp_path / "missing") == ""


def test_connect_unix_handles_paths_longer_than_sun_path(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "api.sock"
    assert len(str(path)) > 108
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(deep, os.O_PATH | os.O_DIRECTORY)
    try:
        server.bind(f"/proc/self/fd/{dir_fd}/{path.name}")  # bind() has the same length limit
    finally:
        os.close(dir_fd)
    server.listen(1)
    client = connect_unix(path, timeout=1)
    client.sendall(b"ping")
    assert server.accept()[0].recv(4) == b"ping"
    client.close()
    server.close()


def test_connect_unix_gives_up_when_the_server_died(tmp_path: Path) -> None:
    with pytest.raises(ConnectionError):
        connect_unix(tmp_path / "never.sock", timeout=5, alive=lambda: False)
    with pytest.raises(TimeoutError):
        connect_unix(tmp_path / "never.sock", timeout=0.1)


def test_released_processes_survive_the_reaper_and_owned_dirs_go_with_stop(tmp_path):
    import subprocess

    from vmm import process

    kept_dir, owned_dir = tmp_path / "kept", tmp_path / "owned"
    kept_dir.mkdir()
    owned_dir.mkdir()
    kept = process.spawn(["sleep", "30"], tmp_path, tmp_path / "kept.log")
    owned = process.spawn(["sleep", "30"], tmp_path, tmp_path / "owned.log")
    process.own_work_dir(kept, kept_dir)
    process.own_work_dir(owned, owned_dir)
    process.release(kept)
    try:
        process.kill_all()
        assert owned.poll() is not None and not owned_dir.exists()
        assert kept.poll() is None and kept_dir.exists()
        assert kept.pid not in process.live_pids()
    finally:
        kept.kill()
        kept.wait()
        assert isinstance(kept, subprocess.Popen)


def _fake_binary(bin_dir, name: str, output: str):
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(0o755)
    return path


def test_binary_version_reads_what_the_binary_prints(tmp_path, monkeypatch):
    from vmm.firecracker import FirecrackerDriver
    from vmm.qemu.host import qemu_version

    _fake_binary(tmp_path / "bin", "qemu-fake", "QEMU emulator version 8.1.3 (Debian 1:8.1.3+ds-1)")
    _fake_binary(tmp_path / "bin", "fc-fake", "Firecracker v1.7.0\n\nSupported snapshot data format versions: v1.0.0")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert qemu_version("qemu-fake") == (8, 1, 3)
    assert FirecrackerDriver("fc-fake").version() == "1.7.0"


def test_binary_version_errors_name_the_binary(tmp_path, monkeypatch):
    from vmm.errors import VmmUnavailable

    binary_version = process.binary_version

    _fake_binary(tmp_path / "bin", "mute-vmm", "no numbers here")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    with pytest.raises(VmmUnavailable, match=r"absent-vmm not found on PATH \(install it\)"):
        binary_version("absent-vmm", r"(\d+)", " (install it)")
    with pytest.raises(VmmUnavailable, match="cannot parse the version of mute-vmm: 'no numbers here'"):
        binary_version("mute-vmm", r"(\d+)\.(\d+)")
