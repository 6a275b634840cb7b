"""The detached lazy server: ``python -m forkd_client.lazy.serve REF --hub URL --home DIR --control DIR``.

``forkd fork REF --lazy --keep`` and ``forkd pull REF --lazy`` return while the head's memory image
(and root filesystem) must stay served (children outlive the CLI; a pull returns once the head is
mountable), so the session runs in this process, started in its own session by
:func:`start_server`. It talks to the CLI through files in the control directory:

- ``ready.json`` (written by the server): ``{"memory", "rootfs", "vmstate", "compat", "digest", "tag",
  "chain", "pid"}`` once the files are mounted (``rootfs``: null when the head has none), or
  ``error.json`` ``{"message", "exit_code"}`` when they could not be;
- ``children.json`` (written by the CLI, ``--children``): the pids of the children mapping the file;
- ``result.json`` (written by the server): the install (a pull's result) or the error that stopped it.

The server removes the control directory once the chain is installed and nothing maps the image any
more; after a failure it stays, with ``server.log``, for ``forkd prune`` (the CLI puts it in the store's
``.staging/``, locked while the server runs).

The server fills the rest (the children's access profile first), installs the chain as ``forkd
pull`` does, and unmounts once it is installed (or failed) AND every child has exited AND no
process holds a served file open (a child's QEMU keeps its disk open until it exits).

Errors are written to ``error.json`` / ``result.json``; the exit status is the CLI's for that class.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from manifest.fileops import write_atomically

from ..install import pid_alive

READY, ERROR, CHILDREN, RESULT, LOG = "ready.json", "error.json", "children.json", "result.json", "server.log"
#: a control directory's name in the store's ``.staging/`` (``forkd prune`` removes one no server holds)
CONTROL_PREFIX = "lazy-"
READY_TIMEOUT_S = 600.0
CHILDREN_TIMEOUT_S = 600.0


def control_directory(staging_root: Path) -> tuple[Path, int]:
    """A fresh control directory ``<staging_root>/lazy-<hex>`` (the store's ``.staging/``, never the system temp
    dir) and an fd holding its flock: pass it to :func:`start_server` (``hold_fd``), then close it; the server
    holds the lock until it exits, so ``forkd prune`` leaves the directory of a running server alone."""
    staging_root.mkdir(parents=True, exist_ok=True)
    control = staging_root / f"{CONTROL_PREFIX}{secrets.token_hex(6)}"
    control.mkdir()
    fd = os.open(control, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return control, fd


def start_server(
    ref: str,
    hub: str,
    token: str | None,
    home: Path,
    control: Path,
    *,
    as_tag: str | None,
    children: bool,
    hold_fd: int | None = None,
) -> subprocess.Popen:
    """Start the server for ``ref`` on ``hub`` detached from this process (its own session, stdio
    to a log in ``control``); the token goes through the environment (FORKD_TOKEN), never argv.
    ``hold_fd`` (the flock on ``control``) stays open in the server for as long as it runs."""
    control.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "forkd_client.lazy.serve", ref, "--hub", hub, "--home", str(home)]
    args += ["--control", str(control)]
    if as_tag:
        args += ["--as", as_tag]
    if children:
        args.append("--children")
    with open(control / LOG, "ab") as log:
        env = {k: v for k, v in os.environ.items() if k != "FORKD_TOKEN"}
        if token:
            env["FORKD_TOKEN"] = token
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=env,
            pass_fds=() if hold_fd is None else (hold_fd,),
        )


def wait_ready(proc: subprocess.Popen, control: Path, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
    """The server's ``ready.json``. Raises ServerFailed (the server's error, or it died / timed out)."""
    deadline = time.monotonic() + timeout
    while True:
        for name in (READY, ERROR):
            data = _read(control / name)
            if data is not None:
                if name == ERROR:
                    raise ServerFailed(str(data.get("message")), int(data.get("exit_code", 1)))
                return data
        if proc.poll() is not None:
            raise ServerFailed(f"the lazy server exited with {proc.returncode}; see {control / LOG}", 1)
        if time.monotonic() > deadline:
            raise ServerFailed(f"the lazy server was not ready after {timeout:.0f} s; see {control / LOG}", 1)
        time.sleep(0.02)


class ServerFailed(Exception):
    """The detached server could not serve the image; ``exit_code`` is the CLI's code for the cause."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write(path: Path, obj: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(obj, indent=1))


def serve(args: argparse.Namespace) -> int:
    from ..exitcodes import exit_code_for
    from ..hub.client import HubClient
    from ..hub.reference import Reference
    from ..store import SnapshotStore
    from .session import LazySession

    control: Path = args.control
    try:
        ref = Reference.parse(args.ref)
        with SnapshotStore(args.home) as store, HubClient(args.hub, os.environ.get("FORKD_TOKEN") or None) as client:
            with LazySession(store, client, ref, as_tag=args.as_tag) as session:
                try:
                    files = session.open()
                    if args.children:  # as forkd fork --lazy --exec: the working set is local before they run
                        session.wait_for_profile_head()
                        session.warm_page_cache()
                except Exception as e:  # noqa: BLE001 - reported to the CLI, which prints it
                    _write(control / ERROR, {"message": str(e), "exit_code": exit_code_for(e)})
                    return exit_code_for(e)
                _write(
                    control / READY,
                    {
                        "memory": str(files.memory),
                        "rootfs": None if files.rootfs is None else str(files.rootfs),
                        "vmstate": str(files.vmstate),
                        "compat": session.head_compat,
                        "digest": session.head_digest,
                        "tag": session.head_tag,
                        "chain": session.chain,
                        "pid": os.getpid(),
                    },
                )
                pids = _wait_children(control) if args.children else []
                try:
                    result = session.fill_and_install(session.image.profile)
                    _write(control / RESULT, {"installed": result.to_obj()})
                    code = 0
                except Exception as e:  # noqa: BLE001 - reported in result.json and the log
                    _write(control / RESULT, {"error": str(e), "exit_code": exit_code_for(e)})
                    print(f"forkd lazy server: {e}", file=sys.stderr)
                    code = exit_code_for(e)
                # nothing may lose its file: not the children, not any other process that opened or mapped it
                while any(pid_alive(pid) for pid in pids) or session.mount.handles.value > 0:
                    time.sleep(0.5)
                if code == 0:  # installed: nothing left to tell (a failure's log stays, for forkd prune)
                    shutil.rmtree(control, ignore_errors=True)
                return code
    except Exception as e:  # noqa: BLE001 - a detached process: the log and error.json are all there is
        _write(control / ERROR, {"message": str(e), "exit_code": 1})
        print(f"forkd lazy server: {e}", file=sys.stderr)
        return 1


def _wait_children(control: Path) -> list[int]:
    deadline = time.monotonic() + CHILDREN_TIMEOUT_S
    while time.monotonic() < deadline:
        data = _read(control / CHILDREN)
        if data is not None:
            return [int(p) for p in data.get("pids", [])]
        time.sleep(0.05)
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m forkd_client.lazy.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("ref")
    parser.add_argument("--hub", required=True, help="the hub's base URL (the token: FORKD_TOKEN)")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--as", dest="as_tag")
    parser.add_argument("--children", action="store_true", help="wait for children.json; stay until they exit")
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
