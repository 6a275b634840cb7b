#!/usr/bin/env python3
"""A 16 GiB base pushed and pulled end to end, against 32x the same for a 512 MiB base, in one run.

Usage: python bench/scale_16g.py [--sizes-mib 512,16384] [--data-fraction 0.25] [--repeat-small 3]
                                 [--rss-limit-mib 300] [--dir DIR]

For each size, a sparse ``memory.bin`` with --data-fraction of it as data (random 4 MiB blocks,
alternately random and text-like bytes, zstd ratio ~1.8: bench/images.py) is imported into a
forkd store, pushed with ``forkd push`` (a real CLI process) into a fresh ``forkd-hub serve``
process, and pulled with ``forkd pull`` into an empty store. Measured per step: wall time, the
client's peak RSS (``ru_maxrss`` of the waited-for process, from ``wait4``) and the hub's peak
RSS during that step (``VmHWM`` of the hub process, reset before the step by writing 5 to
``/proc/PID/clear_refs``). The smallest size runs --repeat-small times (median time, highest
RSS): a few seconds each, so one run is at the mercy of the machine's load. Ratios: each larger size's time against (its size / the first
size) x the first size's time (issue 15: <= 1.2x), and every RSS against --rss-limit-mib
(issue 15: < 300 MiB). The pulled file is compared with the source. Scratch data (about 4x the
data bytes of the largest size) is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, MiB, human, print_table  # noqa: E402
from images import make_memory_image, make_vmstate  # noqa: E402
from oci import sha256_file  # noqa: E402
from procs import ForkdUser, HubServer, forkd_cmd, log_summary  # noqa: E402


@dataclass
class Step:
    size: int
    name: str
    seconds: float
    client_rss: int  # bytes
    hub_rss: int  # bytes
    runs: str = ""  # each run's seconds, when repeated


def hub_hwm(pid: int) -> int:
    """Peak resident bytes of ``pid`` since its last reset (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def reset_hwm(pid: int) -> None:
    """Start a new peak-RSS window for ``pid`` (proc(5): clear_refs, value 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def run_measured(user: ForkdUser, hub: HubServer, *args: str) -> tuple[float, int, int]:
    """``forkd ARGS`` as a child process: (wall seconds, client peak RSS, hub peak RSS)."""
    os.sync()
    reset_hwm(hub.proc.pid)
    t = time.perf_counter()
    proc = subprocess.Popen(forkd_cmd(*args), env=user.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"forkd {' '.join(args)} failed ({proc.returncode}): {err.strip()}")
    return wall, usage.ru_maxrss * 1024, hub_hwm(hub.proc.pid)


def one_size(root: Path, size: int, fraction: float) -> tuple[list[Step], bool, str]:
    """Push and pull one base of ``size`` bytes; its steps, whether the pull matched, the hub log summary."""
    work = root / f"s{size // MiB}"
    src = work / "src"
    src.mkdir(parents=True)
    data = int(size * fraction) // (4 * MiB) * (4 * MiB)
    make_memory_image(src / "memory.bin", size, data, seed=1)
    make_vmstate(src / "vmstate", seed=1)
    log = work / "hub.log"
    steps = []
    with HubServer(work / "hub", log) as hub:
        alice = ForkdUser(work / "alice", hub.url, hub.token("alice", "push:acme/*"))
        alice.run("import", str(src), "base")
        wall, crss, hrss = run_measured(alice, hub, "push", "base", "acme/mem:v1", "--public")
        steps.append(Step(size, "push", wall, crss, hrss))
        shutil.rmtree(alice.home)  # the pusher's store is not needed any more: free its disk
        bob = ForkdUser(work / "bob", hub.url)
        wall, crss, hrss = run_measured(bob, hub, "pull", "acme/mem:v1", "--as", "mem")
        steps.append(Step(size, "pull", wall, crss, hrss))
        identical = sha256_file(bob.home / "snapshots" / "mem" / "memory.bin") == sha256_file(src / "memory.bin")
    summary = log_summary(hub=log)
    shutil.rmtree(work)
    return steps, identical, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mib", default="512,16384", help="memory.bin apparent sizes, smallest first")
    ap.add_argument("--data-fraction", type=float, default=0.25, help="share of memory.bin that is data")
    ap.add_argument("--repeat-small", type=int, default=3, help="runs of the smallest size (median time, peak RSS)")
    ap.add_argument("--rss-limit-mib", type=int, default=300, help="the RSS each process must stay under")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    sizes = [int(s) * MiB for s in args.sizes_mib.split(",")]
    limit = args.rss_limit_mib * MiB

    steps: list[Step] = []
    notes = []
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="scale-16g-") as tmp:
        for size in sizes:
            runs: list[Step] = []
            for _ in range(args.repeat_small if size == sizes[0] else 1):
                done, identical, logs = one_size(Path(tmp), size, args.data_fraction)
                runs += done
                notes.append(f"{human(size)}: pulled memory.bin identical: {identical}; {logs}")
            for name in ("push", "pull"):
                mine = [r for r in runs if r.name == name]
                steps.append(
                    Step(
                        size,
                        name,
                        statistics.median(r.seconds for r in mine),
                        max(r.client_rss for r in mine),
                        max(r.hub_rss for r in mine),
                        "/".join(f"{r.seconds:.1f}" for r in mine),
                    )
                )

    base = {s.name: s for s in steps if s.size == sizes[0]}
    rows = []
    for s in steps:
        scale = s.size / sizes[0]
        expected = base[s.name].seconds * scale
        rows.append(
            [
                f"{human(s.size)} {s.name}",
                f"{s.size // (64 * 1024):,}",
                s.runs,
                f"{s.seconds:.1f}",
                f"{expected:.1f}" if s.size != sizes[0] else "",
                f"{s.seconds / expected:.2f}x" if s.size != sizes[0] else "",
                f"{s.client_rss / MiB:.0f}",
                f"{s.client_rss / limit:.2f}x",
                f"{s.hub_rss / MiB:.0f}",
                f"{s.hub_rss / limit:.2f}x",
            ]
        )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"scale_16g: forkd push + pull of a base, {args.data_fraction:.0%} data (half random, half text-like); "
        f"load average {load}; {MACHINE_NOTE}"
    )
    print_table(
        [
            "step",
            "chunks",
            "runs (s)",
            "seconds",
            f"scaled {human(sizes[0])} s",
            "time ratio",
            "client RSS MiB",
            f"vs {args.rss_limit_mib} MiB",
            "hub RSS MiB",
            f"vs {args.rss_limit_mib} MiB",
        ],
        rows,
    )
    print(
        "time ratio: seconds / (size ratio x the smallest size's median seconds), goal <= 1.2x; RSS: peak, goal < 1.00x"
    )
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
