#!/usr/bin/env python3
"""Start-up of ``forkd-hub serve``: time to the first ``/healthz`` 200 on a new and on an existing data dir.

Usage: python bench/hub_startup.py [--repeat 7] [--tree DIR]

Each start is a fresh ``python -m hub_server.entry serve`` (what the ``forkd-hub`` console script runs;
``hub_server.cli`` for a tree without that module) on a free loopback port, its bytecode compiled
first (as an installed package has it); the clock runs from the spawn to the first 200 of ``/healthz``
(polled every 20 ms). "new": an empty data dir (SQLite created and migrated, the filesystem store laid
out); "existing": the same data dir again. Printed per row: the median wall time, the server's own CPU
seconds up to that moment (``/proc/PID/stat``: user + system; less sensitive to a loaded machine than the
wall), and the wall against issue 31's goal (≤ 1 s existing, ≤ 2 s new). Peers in the same run: the
interpreter's own start-up (``python -c pass``), the import of the stack's dependencies alone (SQLAlchemy,
SQLModel, aiosqlite, Litestar, uvicorn: the floor of any server built on them) and of the server's modules
(both with the collector paused, as ``forkd-hub`` loads them). ``--tree DIR`` also
times another source tree (e.g. a checkout of the commit before a change).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
from common import MACHINE_NOTE, ROOT, compile_tree, median, print_table  # noqa: E402
from procs import free_port, stop_process  # noqa: E402

GOALS = {"new": 2.0, "existing": 1.0}
#: what any server on this stack imports before it can answer: the floor of a start-up
DEPENDENCIES = "sqlalchemy.ext.asyncio, sqlalchemy.orm, sqlmodel, aiosqlite, litestar, uvicorn"
#: what ``serve`` imports (its own modules and the dependencies)
SERVER_MODULES = "hub_server.cli, hub_server.app, uvicorn"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process so far (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_once(tree: Path, data_dir: Path, log: Path) -> tuple[float, float]:
    """(wall seconds, server CPU seconds) from spawning ``forkd-hub serve`` to its first healthy answer."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    module = "hub_server.entry" if (tree / "hub_server" / "entry.py").is_file() else "hub_server.cli"
    with log.open("ab") as out:
        began = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "serve", "--port", str(port), "--data-dir", str(data_dir)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tree,
        )
        try:
            with httpx.Client(timeout=2) as client:
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError(f"forkd-hub serve exited with {proc.returncode}: see {log}")
                    try:
                        if client.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                            return time.perf_counter() - began, cpu_seconds(proc.pid)
                    except httpx.TransportError:
                        pass
                    if time.perf_counter() - began > 300:
                        raise RuntimeError(f"forkd-hub serve not healthy after 300 s: see {log}")
                    time.sleep(0.02)
        finally:
            stop_process(proc)


def floor_once(tree: Path, code: str) -> tuple[float, float]:
    """(wall, CPU) of ``python -c CODE`` from ``tree``."""
    before = os.times()
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
    wall = time.perf_counter() - began
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def rows_for(label: str, tree: Path, work: Path, repeat: int) -> list[list[str]]:
    runs: dict[str, list[tuple[float, float]]] = {"new": [], "existing": []}
    for i in range(repeat):
        data_dir = work / f"{label}-{i}"
        log = work / f"{label}.log"
        runs["new"].append(start_once(tree, data_dir, log))
        runs["existing"].append(start_once(tree, data_dir, log))
        shutil.rmtree(data_dir)
    rows = []
    for kind, samples in runs.items():
        wall, cpu = median([w for w, _ in samples]), median([c for _, c in samples])
        rows.append(
            [
                f"serve, {kind} data dir ({label})",
                f"{wall * 1000:.0f}",
                f"{cpu * 1000:.0f}",
                f"{wall / GOALS[kind]:.2f}×",
            ]
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7, help="starts of each kind (7)")
    parser.add_argument("--tree", type=Path, help="another source tree to time as well (e.g. the commit before)")
    args = parser.parse_args()
    trees = [("this tree", ROOT)] + ([("other tree", args.tree.resolve())] if args.tree else [])
    for _, tree in trees:
        compile_tree(tree)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hub-startup-") as tmp:
        work = Path(tmp)
        for label, tree in trees:
            rows += rows_for(label, tree, work, args.repeat)
        for name, code in (
            ("python -c pass (interpreter only)", "pass"),
            ("import the dependencies (collector paused)", f"import gc; gc.disable(); import {DEPENDENCIES}"),
            ("import the server's modules (collector paused)", f"import gc; gc.disable(); import {SERVER_MODULES}"),
        ):
            samples = [floor_once(ROOT, code) for _ in range(args.repeat)]
            wall, cpu = median([w for w, _ in samples]), median([c for _, c in samples])
            rows.append([name, f"{wall * 1000:.0f}", f"{cpu * 1000:.0f}", ""])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"hub_startup: median of {args.repeat} starts each; load average {load}; {MACHINE_NOTE}")
    print_table(["start", "wall ms", "server CPU ms", "wall vs goal"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
