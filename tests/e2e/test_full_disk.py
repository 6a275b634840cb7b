"""Issue 30 item 1: a full disk, on a real tmpfs, with a real hub and real ``forkd`` processes.

The store lives on a small tmpfs: pull once, leave an interrupted pull behind, fill the rest. Then
``pull``, ``inspect --verify/--deep``, ``tag`` and ``prune`` each either work or say
``no space left on <mount>`` and what to free; never ``internal error (OperationalError: disk I/O
error)``, which is what they printed before (SQLite cannot grow a database's WAL index on a full disk).
``forkd prune``, the clean-up tool, works on the full disk and frees what the interrupted pull left.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.test_push_pull_cli import User, kill_when

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (run as root, as CI does)"),
]

DISK_MIB = 64


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubProcess]:
    process = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield process
    assert process.stop() == 0


def _snapshot(src: Path, mib: int) -> Path:
    src.mkdir()
    with open(src / "memory.bin", "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
    (src / "vmstate").write_bytes(b"vm" * 100)
    return src


def _fill(mount: Path) -> None:
    """Write until the filesystem refuses (ENOSPC), in 1 MiB then 4 KiB pieces, and keep what fit."""
    fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for piece in (1 << 20, 4096):
            try:
                while os.write(fd, b"\xff" * piece) == piece:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    assert os.statvfs(mount).f_bavail == 0


def _no_internal_error(result: subprocess.CompletedProcess) -> None:
    text = result.stdout + result.stderr
    assert "internal error" not in text and "OperationalError" not in text, text


def test_every_command_on_a_full_disk_works_or_says_what_to_free(small_disk: Path, hub: HubProcess, tmp_path: Path):
    publisher = User(tmp_path / "publisher", hub)
    publisher.run("login", hub.url, "--token-stdin", input=hub.token("ci", "push:acme/*") + "\n")
    publisher.run("import", str(_snapshot(tmp_path / "small", 4)), "small")
    publisher.run("import", str(_snapshot(tmp_path / "big", 24)), "big")
    publisher.run("push", "-q", "small", "acme/py:v1")
    publisher.run("push", "-q", "big", "acme/py:big")

    user = User(
        tmp_path / "user",
        hub,
        FORKD_HOME=str(small_disk / "home"),
        FORKD_PULL_RANGE_BYTES=str(1 << 20),
        FORKD_PULL_PARALLEL="1",
    )
    user.home = small_disk / "home"
    user.run("login", hub.url, "--token-stdin", input=hub.token("reader", "pull:acme/*") + "\n")
    user.run("pull", "acme/py:v1", "--as", "v1")
    staging = user.home / ".staging"
    pulling = user.start("pull", "acme/py:big", "--as", "big")  # interrupted: leaves a resumable staging dir
    kill_when(pulling, lambda: any(f.stat().st_blocks * 512 >= 4 << 20 for f in staging.glob("resume-*/memory.bin")))
    user.run("prune", "--dry-run")  # opens and closes both records: the last close removes their WAL index
    assert not list(user.home.glob("*.db-shm"))  # so on the full disk SQLite must create it again, and cannot
    _fill(small_disk)

    pull = user.run("pull", "acme/py:v1", "--as", "v1-again", check=False)
    _no_internal_error(pull)
    assert pull.returncode == 1 and f"no space left on {small_disk} for layer" in pull.stderr
    assert "'forkd prune' removes what interrupted pulls and pushes left (" in pull.stderr  # with its size
    assert not (user.home / "snapshots" / "v1-again").exists()

    for args in (["inspect", "v1", "--verify"], ["inspect", "v1", "--deep"], ["images"]):
        result = user.run(*args, check=False)
        _no_internal_error(result)
        assert result.returncode == 0, (args, result.stderr)
    assert "Chain verified:      yes" in user.run("inspect", "v1", "--deep").stdout

    tag = user.run("tag", "v1", "v1-copy", check=False)
    _no_internal_error(tag)
    assert tag.returncode == 1 and tag.stderr.startswith(f"forkd: error: no space left on {small_disk}")
    assert "'forkd rmi TAG' removes a snapshot" in tag.stderr
    assert not (user.home / "snapshots" / "v1-copy").exists()

    left = sorted(p.name for p in staging.iterdir())
    assert any(name.startswith("resume-") for name in left)
    prune = user.run("prune", check=False)
    _no_internal_error(prune)
    assert prune.returncode == 0 and "removed 1 staged directory" in prune.stdout, prune.stdout + prune.stderr
    assert not list(staging.glob("resume-*"))
    assert os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize > 4 << 20  # it freed the space

    again = user.run("tag", "v1", "v1-copy", check=False)  # with the space prune freed, the same command works
    assert again.returncode == 0, again.stderr
