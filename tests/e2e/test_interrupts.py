"""Issue 16 item 13: Ctrl-C (SIGINT) on a real ``forkd`` process mid-transfer.

The bar stops where it was (not at 100%), the message says what is kept and how to resume,
the exit status is 130, and running the same command again finishes the transfer.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess, forkd
from tests.e2e.test_push_pull_cli import User

pytestmark = pytest.mark.slow
MiB = 1 << 20
_BAR = re.compile(r"(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) MiB")


@pytest.fixture
def hub(tmp_path: Path):
    h = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    yield h
    assert h.stop() == 0


def random_snapshot(root: Path, mib: int) -> Path:
    src = root / "src"
    src.mkdir(parents=True)
    (src / "memory.bin").write_bytes(os.urandom(mib * MiB))
    (src / "vmstate").write_bytes(b"vmstate" * 100)
    return src


def run_on_a_terminal_until(argv: list[str], env: dict[str, str], ready) -> tuple[int, str]:
    """Run ``argv`` with a pty as stdout/stderr; send SIGINT once ``ready(output)``; return (status, output)."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)
    os.close(terminal)
    out = b""
    sent = False
    try:
        while True:
            if select.select([controller], [], [], 0.05)[0]:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk and proc.poll() is not None:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
            if not sent and ready(out.decode(errors="replace")):
                proc.send_signal(signal.SIGINT)
                sent = True
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(controller)
    assert sent, out.decode(errors="replace")[-2000:]
    return status, out.decode(errors="replace")


def moving(output: str) -> bool:
    return any(0 < float(done) < float(total) for done, total in _BAR.findall(output))


def test_ctrl_c_during_push_stops_the_bar_where_it_was_and_the_push_resumes(hub, tmp_path):
    user = User(tmp_path / "alice", hub, FORKD_UPLOAD_PART_BYTES=str(64 << 10))
    user.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    user.run("import", str(random_snapshot(tmp_path, 24)), "base")
    status, output = run_on_a_terminal_until(forkd("push", "base", "acme/py:v1"), user.env, moving)
    assert status == 130, output[-2000:]
    assert "push interrupted: what the hub committed is kept; run 'forkd push base acme/py:v1' again" in output
    done, total = _BAR.findall(output)[-1]
    assert float(done) < float(total), output[-2000:]  # the last drawn bar is where it stopped
    assert "Traceback" not in output
    again = user.run("push", "base", "acme/py:v1")
    assert "pushed 1 of 1 layer(s)" in again.stdout


def test_ctrl_c_during_a_piped_pull_exits_130_and_the_pull_resumes(hub, tmp_path):
    alice = User(tmp_path / "alice", hub)
    alice.run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
    alice.run("import", str(random_snapshot(tmp_path, 24)), "base")
    alice.run("push", "base", "acme/py:v1")
    bob = User(
        tmp_path / "bob",
        hub,
        FORKD_PULL_PARALLEL="1",
        FORKD_PULL_RANGE_BYTES=str(64 << 10),
        FORKD_PROGRESS_INTERVAL="0.1",
    )
    bob.run("login", hub.url, "--token-stdin", input=hub.token("bob", "pull:acme/*") + "\n")
    proc = bob.start("pull", "acme/py:v1")
    lines: list[str] = []
    assert proc.stderr is not None
    for raw in proc.stderr:  # piped: periodic progress lines, in IEC units
        lines.append(raw.decode())
        if re.search(r"pull py-v1: at \d+\.\d MiB of 24\.0 MiB", lines[-1]):
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read().decode()
    status = proc.wait(timeout=60)
    assert status == 130, "".join(lines) + rest
    assert "pull interrupted: installed links and verified chunks are kept; run 'forkd pull acme/py:v1'" in rest
    stopped = re.search(r"pull py-v1: interrupted at (\d+\.\d) MiB of 24\.0 MiB", rest)
    assert stopped and float(stopped.group(1)) < 24.0, rest
    assert "Traceback" not in rest
    again = bob.run("pull", "acme/py:v1")
    assert "pulled as py-v1" in again.stdout
    assert "kept from an interrupted pull" in again.stderr
