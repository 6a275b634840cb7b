"""tests/services/readiness.py: a slow start that works is waited for, a stuck or dead one is reported with
its own output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.services.readiness import NotReady, cpu_seconds, wait_ready

pytestmark = pytest.mark.integration  # starts small Python processes


def _start(code: str, log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)


def test_a_process_that_exits_is_reported_with_the_end_of_its_log(tmp_path: Path) -> None:
    proc = _start("print('listening failed: address in use', flush=True); raise SystemExit(3)", tmp_path / "log")
    with pytest.raises(NotReady, match=r"(?s)the-server exited with status 3.*address in use"):
        wait_ready(lambda: False, what="the-server", proc=proc, log=tmp_path / "log")


def test_a_process_busy_past_the_bound_is_waited_for(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = f"import pathlib, time\nend = time.monotonic() + 3\nwhile time.monotonic() < end: pass\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)"
    proc = _start(code, tmp_path / "log")
    try:
        waited = wait_ready(ready.exists, what="busy", proc=proc, log=tmp_path / "log", base=0.5, grace=1.0)
    finally:
        proc.kill()
        proc.wait()
    assert waited >= 3  # past the 0.5 s bound: it kept using CPU, so the wait went on


def test_a_process_that_makes_no_progress_past_the_bound_is_given_up_on(tmp_path: Path) -> None:
    proc = _start("import time\nprint('started, then stuck', flush=True)\ntime.sleep(60)", tmp_path / "log")
    try:
        with pytest.raises(
            NotReady, match=r"(?s)stuck-one was not ready after .* made no progress.*started, then stuck"
        ):
            wait_ready(lambda: False, what="stuck-one", proc=proc, log=tmp_path / "log", base=0.5, grace=1.0)
    finally:
        proc.kill()
        proc.wait()


def test_the_limit_ends_even_a_busy_wait(tmp_path: Path) -> None:
    proc = _start("while True: pass", tmp_path / "log")
    try:
        with pytest.raises(NotReady, match="was not ready after 2 s"):
            wait_ready(lambda: False, what="spinner", proc=proc, base=0.5, grace=0.5, limit=2)
    finally:
        proc.kill()
        proc.wait()


def test_cpu_seconds_of_a_missing_process_is_none() -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert cpu_seconds(proc.pid) is None
    assert cpu_seconds(1) is not None
