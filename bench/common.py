"""Shared constants, timing and printing of the benchmarks.

The other shared pieces live beside it: ``procs`` (hub, registry and forkd processes, their
logs), ``proxy`` (a byte-counting TCP relay), ``images`` (sparse memory images, file facts),
``oci`` (skopeo and OCI layouts), ``netshape`` (a shaped loopback link).
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# ``python bench/X.py`` puts bench/ first on the path, not the checkout: the scripts also use the tests'
# service helpers (tests/services: readiness, SeaweedFS), so the checkout goes on the path here, where every
# script looks first (tests/test_benchmarks_doc.py runs each one's --help as a user would).
if str(ROOT) not in sys.path:
    sys.path.insert(1, str(ROOT))
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PAGE = 4 * KiB
BLOCK = 4 * MiB
MACHINE_NOTE = "2 cores, 24 GiB, Debian 12; shared and noisy: read ratios, not absolutes"
SKOPEO_BLOB_CACHE = Path("/var/lib/containers/cache/blob-info-cache-v1.boltdb")


# -- timing and printing ------------------------------------------------------------------------


#: the packages a ``forkd`` or ``forkd-hub`` process imports from this tree
PACKAGES = ("manifest", "vmm", "forkd_client", "hub_server", "web", "clikit")


def compile_tree(root: Path = ROOT, packages: Sequence[str] = PACKAGES) -> None:
    """Compile ``packages`` of the tree at ``root`` to bytecode, as an installed wheel has them. A
    source tree on the path (the editable install) is otherwise compiled again by every process
    where PYTHONDONTWRITEBYTECODE is set (this machine's environment): ~80 ms of every ``forkd``
    run that no installed client pays. Bytecode is still read with the variable set."""
    import compileall

    for package in packages:
        compileall.compile_dir(str(root / package), quiet=1)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def timed_cpu(fn: Callable[[], object]) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of ``fn()``, started after a ``sync`` (it never waits behind what
    was written before it); cpu is the user + system time of the child processes it ran and
    waited for (a client, not the servers)."""
    os.sync()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    fn()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of ``fn()``, started after a ``sync``."""
    return timed_cpu(fn)[0]


def timed_runs(fn: Callable[[int], object], repeat: int, before: Callable[[int], object] | None = None) -> list[float]:
    """Run ``before(i)`` untimed, then time ``fn(i)`` (see :func:`timed`), ``repeat`` times."""
    times = []
    for i in range(repeat):
        if before is not None:
            before(i)
        times.append(timed(lambda: fn(i)))
    return times


def mib_s(nbytes: int, seconds: float) -> float:
    return nbytes / MiB / seconds if seconds > 0 else float("inf")


def fmt_runs(times: Sequence[float]) -> str:
    return "/".join(f"{t:.2f}" for t in times)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str | None = None) -> None:
    """A plain aligned table (first column left, the others right), pasteable into markdown as code."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if title:
        print(title)
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print()


def human(nbytes: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes:.0f} B"
