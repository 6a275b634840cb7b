"""Fork N = 1, 5, 10 QEMU microvm children: copy-on-write vs a naive full-copy restore.

    python bench/fork_children.py [--mem-mib 256] [--fill-mib 64] [--counts 1,5,10]

Both modes restore the same guest (booted once per mode, ``--fill-mib`` of random data written
into its tmpfs before the snapshot) in the same run:

* **CoW** (``QemuMicrovmDriver.fork``): RAM is ``memory.bin`` mapped ``share=off``; the vmstate
  holds only device state (x-ignore-shared).
* **naive** (reference vmm-qemu.md §4b): anonymous RAM, the whole RAM goes through the migration
  stream; each child reads it back with ``-incoming exec:cat vmstate``.

"fork time" runs from the first process spawn until every child has been restored, resumed, and
has answered the guest agent (the RNG reseed round-trip). Memory is read from /proc/<pid>/smaps
once all children of a round are up. Ratios are naive / CoW, measured here, now.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vmm import process  # noqa: E402
from vmm.guest import cached_guest  # noqa: E402
from vmm.guest.agent import AgentChannel  # noqa: E402
from vmm.memstats import read_mem_stats  # noqa: E402
from vmm.qemu import QemuMicrovmDriver  # noqa: E402
from vmm.qemu.host import tcg_kernel_args  # noqa: E402
from vmm.qmp import QmpClient  # noqa: E402
from vmm.unixsock import connect_unix  # noqa: E402

MIB = 1 << 20


@dataclass
class Round:
    mode: str
    n: int
    seconds: float
    pss: list[int]
    ram_pss: list[int]
    ram_private: list[int]


# -- naive full-copy baseline ----------------------------------------------------------------


class NaiveVm:
    """A QEMU microvm with anonymous RAM, driven just enough for the baseline."""

    def __init__(self, work: Path, argv: list[str]) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.proc = process.spawn(argv, work, work / "qemu.log")

    def connect(self) -> None:
        alive = lambda: self.proc.poll() is None  # noqa: E731
        self.qmp = QmpClient.connect(self.work / "qmp.sock", 60, alive)
        sock = connect_unix(self.work / "console.sock", 60, alive)
        self.agent = AgentChannel(sock.fileno(), sock.fileno(), alive, sock.close)

    def kill(self) -> None:
        process.stop(self.proc)


def naive_argv(mem_mib: int) -> list[str]:
    return [
        "qemu-system-x86_64",
        "-M",
        "microvm",
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-m",
        f"{mem_mib}M",
        "-smp",
        "1",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-chardev",
        "socket,id=con,path=console.sock,server=on,wait=off",
        "-serial",
        "chardev:con",
        "-qmp",
        "unix:qmp.sock,server=on,wait=off",
    ]


def naive_snapshot(root: Path, mem_mib: int, fill_mib: int) -> tuple[Path, float]:
    guest = cached_guest()
    cmdline = f"{guest.cmdline} {' '.join(tcg_kernel_args())}"
    vm = NaiveVm(
        root / "naive-base",
        [*naive_argv(mem_mib), "-kernel", str(guest.kernel), "-initrd", str(guest.initrd), "-append", cmdline],
    )
    try:
        vm.connect()
        vm.agent.hello(90)
        vm.agent.run(f"head -c {fill_mib * MIB} /dev/urandom > /tmp/fill", 120)
        state = root / "naive-base" / "vmstate"
        started = time.perf_counter()
        vm.qmp.execute("stop")
        vm.qmp.execute("migrate", {"uri": f"exec:cat > {shlex.quote(str(state))}"})
        while vm.qmp.execute("query-migrate").get("status") != "completed":
            time.sleep(0.005)
        return state, time.perf_counter() - started
    finally:
        vm.kill()


def naive_fork(root: Path, state: Path, mem_mib: int, n: int) -> tuple[list[NaiveVm], float]:
    started = time.perf_counter()
    vms = [
        NaiveVm(root / f"naive-{n}-{i}", [*naive_argv(mem_mib), "-incoming", f"exec:cat {shlex.quote(str(state))}"])
        for i in range(n)
    ]

    def restore(vm: NaiveVm) -> None:
        vm.connect()  # QMP is served only once the incoming migration has loaded
        while vm.qmp.execute("query-status")["status"] == "inmigrate":
            time.sleep(0.005)
        vm.qmp.execute("cont")
        assert vm.agent.reseed().ok

    with ThreadPoolExecutor(max_workers=n) as pool:
        list(pool.map(restore, vms))
    return vms, time.perf_counter() - started


def anonymous_ram(pid: int, mem_mib: int) -> tuple[int, int]:
    """(Pss, Private_Dirty) of a naive child's guest RAM.

    That is the smallest anonymous mapping of at least ``mem_mib`` (the TCG code buffer is a
    larger one, 1 GiB by default, so "the largest anonymous mapping" would pick the wrong one).
    """
    mappings: list[tuple[int, int, int]] = []
    current: dict[str, int] | None = None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping header
            if current is not None:
                mappings.append((current["Size"], current["Pss"], current["Private_Dirty"]))
            current = {"Size": 0, "Pss": 0, "Private_Dirty": 0} if len(head) == 5 else None
        elif current is not None and head[0].rstrip(":") in current:
            current[head[0].rstrip(":")] = int(head[1]) * 1024
    if current is not None:
        mappings.append((current["Size"], current["Pss"], current["Private_Dirty"]))
    size, pss, dirty = min((m for m in mappings if m[0] >= mem_mib * MIB), default=(0, 0, 0))
    assert size, "guest RAM mapping not found"
    return pss, dirty


# -- the run ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mem-mib", type=int, default=256)
    parser.add_argument("--fill-mib", type=int, default=64)
    parser.add_argument("--counts", default="1,5,10")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    driver = QemuMicrovmDriver()
    status = driver.available()
    if not status.ok:
        print(f"QEMU unavailable: {status.reason}", file=sys.stderr)
        return 1
    root = Path(tempfile.mkdtemp(prefix="forkd-bench-"))
    rounds: list[Round] = []
    try:
        guest = cached_guest()
        vm = driver.boot(guest.boot_spec(root / "cow-base", mem_mib=args.mem_mib))
        vm.run(f"head -c {args.fill_mib * MIB} /dev/urandom > /tmp/fill", timeout=120, check=True)
        started = time.perf_counter()
        snap = driver.snapshot(vm, root / "cow-base")
        cow_snap_s = time.perf_counter() - started
        with open(snap.memory, "rb") as f:  # a stored snapshot is written back: clean page cache
            os.fsync(f.fileno())
        naive_state, naive_snap_s = naive_snapshot(root, args.mem_mib, args.fill_mib)

        for n in counts:
            started = time.perf_counter()
            children = driver.fork(snap, n, work_dir=root / f"cow-{n}")
            cow_s = time.perf_counter() - started
            stats = [c.mem_stats() for c in children]
            rounds.append(
                Round(
                    "CoW",
                    n,
                    cow_s,
                    [s.pss for s in stats],
                    [s.guest_ram_pss for s in stats],
                    [s.guest_ram_private_dirty for s in stats],
                )
            )
            for c in children:
                c.kill()

            naive, naive_s = naive_fork(root, naive_state, args.mem_mib, n)
            pss = [read_mem_stats(v.proc.pid, None).pss for v in naive]
            ram = [anonymous_ram(v.proc.pid, args.mem_mib) for v in naive]
            rounds.append(Round("naive", n, naive_s, pss, [r[0] for r in ram], [r[1] for r in ram]))
            for v in naive:
                v.kill()

        report(
            rounds,
            args,
            cow_snap_s,
            snap.vmstate.stat().st_size,
            naive_snap_s,
            naive_state.stat().st_size,
            status.accel or "?",
        )
    finally:
        process.kill_all()
        shutil.rmtree(root, ignore_errors=True)
    return 0


def report(
    rounds: list[Round],
    args: argparse.Namespace,
    cow_snap_s: float,
    cow_state: int,
    naive_snap_s: float,
    naive_state: int,
    accel: str,
) -> None:
    mem = args.mem_mib * MIB
    print(
        f"guest {args.mem_mib} MiB, {args.fill_mib} MiB filled before the snapshot, accel {accel}, "
        f"{os.cpu_count()} host cores\n"
    )
    print(
        f"snapshot: CoW {cow_snap_s * 1000:.0f} ms (vmstate {cow_state / 1024:.0f} KiB)   "
        f"naive {naive_snap_s * 1000:.0f} ms (vmstate {naive_state / MIB:.0f} MiB)   "
        f"ratio naive/CoW {naive_snap_s / cow_snap_s:.0f}x\n"
    )
    header = (
        f"{'mode':<6} {'N':>3} {'fork→all up':>12} {'per child':>10} {'Pss/child':>10} "
        f"{'RAM Pss':>9} {'RAM priv':>9} {'priv % RAM':>10} {'sum Pss':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rounds:
        print(
            f"{r.mode:<6} {r.n:>3} {r.seconds:>10.2f} s {r.seconds / r.n * 1000:>7.0f} ms "
            f"{_mib(statistics.mean(r.pss)):>10} {_mib(statistics.mean(r.ram_pss)):>9} "
            f"{_mib(statistics.mean(r.ram_private)):>9} "
            f"{100 * statistics.mean(r.ram_private) / mem:>9.1f}% {_mib(sum(r.pss)):>9}"
        )
    print("\nratios naive / CoW (higher = CoW better):")
    by_key = {(r.mode, r.n): r for r in rounds}
    for n in sorted({r.n for r in rounds}):
        cow, naive = by_key[("CoW", n)], by_key[("naive", n)]
        print(
            f"  N={n:<3} fork time {naive.seconds / cow.seconds:5.1f}x   "
            f"Pss/child {statistics.mean(naive.pss) / statistics.mean(cow.pss):5.1f}x   "
            f"guest-RAM private/child "
            f"{statistics.mean(naive.ram_private) / max(1, statistics.mean(cow.ram_private)):6.1f}x"
        )


def _mib(value: float) -> str:
    return f"{value / MIB:.1f} MiB"


if __name__ == "__main__":
    sys.exit(main())
