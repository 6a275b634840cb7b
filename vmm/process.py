"""Starting, tracking and reaping VMM processes, so no VMM outlives the Python process.

Every process started through ``spawn`` is remembered until ``stop`` reaps it; an ``atexit`` hook
kills whatever is left (a test that failed half-way, a caller that forgot ``kill()``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from vmm.errors import VmmUnavailable

_live: set[subprocess.Popen[bytes]] = set()
_work_dirs: dict[subprocess.Popen[bytes], Path] = {}
_lock = threading.Lock()


def spawn(
    argv: list[str], cwd: Path, log_path: Path, console_pipes: bool = False, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in ``cwd`` with stdout+stderr appended to ``log_path``.

    With ``console_pipes`` stdin and stdout are pipes (a serial console on stdio, as Firecracker
    has); stderr still goes to the log. ``env`` adds to (or replaces) variables of this process's
    environment. Raises ``OSError`` if the binary cannot be executed.
    """
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **env} if env else None,
            stdin=subprocess.PIPE if console_pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if console_pipes else log,
            stderr=log,
            start_new_session=True,  # a Ctrl-C meant for the caller must not kill VMs mid-snapshot
        )
    with _lock:
        _live.add(proc)
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> int | None:
    """SIGKILL ``proc`` if still running and reap it; return its exit status. Never raises.

    A VMM holds nothing that needs flushing: guest RAM lives in a file or dies with the process,
    so a graceful shutdown would only cost time.
    """
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout)
    except (OSError, subprocess.TimeoutExpired):
        pass
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    with _lock:
        _live.discard(proc)
        work_dir = _work_dirs.pop(proc, None)
    if work_dir is not None:
        shutil.rmtree(work_dir, ignore_errors=True)
    return proc.returncode


def own_work_dir(proc: subprocess.Popen[bytes], work_dir: Path) -> None:
    """Delete ``work_dir`` when ``proc`` is stopped (by ``stop`` or the exit-time reaper)."""
    with _lock:
        _work_dirs[proc] = work_dir


def release(proc: subprocess.Popen[bytes]) -> None:
    """Hand ``proc`` over to the caller: it outlives this Python process and its work dir stays."""
    with _lock:
        _live.discard(proc)
        _work_dirs.pop(proc, None)


def live_pids() -> list[int]:
    """Pids of VMM processes started here and not yet reaped (for leak checks in tests)."""
    with _lock:
        return sorted(p.pid for p in _live if p.poll() is None)


def log_tail(path: Path, limit: int = 2000) -> str:
    """The last ``limit`` characters of a log file ('' if missing), for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - limit))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


def binary_version(binary: str, pattern: str, install_hint: str = "") -> re.Match[str]:
    """Run ``binary --version`` and match ``pattern`` in what it prints.

    Raises ``VmmUnavailable`` when the binary is not on PATH (with ``install_hint``), cannot be
    run, or prints no version ``pattern`` recognises.
    """
    path = shutil.which(binary)
    if not path:
        raise VmmUnavailable(f"{binary} not found on PATH{install_hint}")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VmmUnavailable(f"{binary} --version failed: {exc}") from exc
    match = re.search(pattern, out)
    if not match:
        raise VmmUnavailable(f"cannot parse the version of {binary}: {out.strip()[:200]!r}")
    return match


@atexit.register
def kill_all() -> None:
    """Kill and reap every VMM process started here (also runs at interpreter exit)."""
    with _lock:
        procs = list(_live)
    for proc in procs:
        stop(proc, timeout=2.0)
