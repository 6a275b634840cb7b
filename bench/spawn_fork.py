"""The whole ``forkd fork`` path: a verified depth-3 chain vs a flat snapshot of the same image.

    python bench/spawn_fork.py [--mem-mib 128] [--children 1] [--runs 10] [--dir DIR]

Makes real QEMU (TCG) snapshots with the library the CLI uses, in a scratch store: a base
(``forkd snapshot``), two links on it (``forkd snapshot-diff``, each writing a few MiB in the
guest), then ``flat`` = ``forkd compact l2``: a base holding the very same memory image as the
chain's head, so the only difference between the two is the chain. Then, alternating flat and
chain in the same run, ``--runs`` times each:

* **CLI**: ``forkd fork TAG -n N --json`` as a subprocess, start to exit: the interpreter and its
  imports, opening the store, resolving and verifying the chain (every parent through the
  verified record), the compat check, starting the QEMU children and waiting until each has
  been restored, resumed and has answered the guest agent, reading their memory, killing them;
* **library**: :func:`forkd_client.vmops.fork` in this process, from the call until every child
  answered (what the CLI does between opening the store and printing), with the verification
  share it reports (``verify_ms``).

Each round forks both (alternating which goes first). Prints the median times and, per path,
the median over the rounds of chain / flat (the goal is <= 1.1x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forkd_client.store import SnapshotStore  # noqa: E402
from forkd_client.vmops import fork, snapshot_base, snapshot_diff  # noqa: E402

CHAIN = ["base", "l1", "l2"]
#: the console script installed with this interpreter (not a version manager's shim, which adds its own start-up)
_BESIDE = Path(sys.executable).parent / "forkd"
FORKD = str(_BESIDE) if _BESIDE.is_file() else (shutil.which("forkd") or "forkd")
FLAT = "flat"


def build(store: SnapshotStore, mem_mib: int) -> float:
    """base -> l1 -> l2 with real guests, then ``flat`` compacted from l2; return seconds taken."""
    started = time.perf_counter()
    snapshot_base(store, "base", mem_mib=mem_mib, exec_cmd="head -c 8388608 /dev/urandom > /tmp/base")
    snapshot_diff(store, "base", "l1", "head -c 4194304 /dev/urandom > /tmp/l1")
    snapshot_diff(store, "l1", "l2", "head -c 4194304 /dev/urandom > /tmp/l2")
    store.compact("l2", FLAT)
    return time.perf_counter() - started


def cli_fork_s(home: Path, tag: str, children: int) -> float:
    """Seconds for one ``forkd fork TAG -n N --json`` process, start to exit."""
    env = {**os.environ, "FORKD_HOME": str(home)}
    started = time.perf_counter()
    done = subprocess.run(
        [FORKD, "fork", tag, "-n", str(children), "--json"], env=env, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"forkd fork {tag} failed ({done.returncode}): {done.stderr.strip()}")
    if len(json.loads(done.stdout)["children"]) != children:
        raise SystemExit(f"forkd fork {tag}: wrong number of children in {done.stdout}")
    return elapsed


def library_fork_s(home: Path, tag: str, children: int) -> tuple[float, float]:
    """(seconds from the call until every child answered, the verification's ms in it)."""
    with SnapshotStore(home) as store:
        started = time.perf_counter()
        forked = fork(store, tag, children)
        elapsed = time.perf_counter() - started
        with forked:
            if len(forked.children) != children or len(forked.chain) != (1 if tag == FLAT else len(CHAIN)):
                raise SystemExit(f"fork {tag}: unexpected result {forked.to_obj()}")
            return elapsed, forked.verify_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mem-mib", type=int, default=128, help="guest RAM (default 128)")
    parser.add_argument("--children", type=int, default=1, help="children per fork (default 1)")
    parser.add_argument("--runs", type=int, default=10, help="rounds, each forking both (default 10)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spawn-fork-", dir=args.dir))
    try:
        home = root / "store"
        with SnapshotStore(home) as store:
            build_s = build(store, args.mem_mib)
            same = (store.path("l2") / "memory.bin").read_bytes() == (store.path(FLAT) / "memory.bin").read_bytes()
        if not same:
            raise SystemExit("flat's memory.bin differs from l2's: the comparison would be unfair")
        os.sync()  # no write-back of the just-written files during the timed forks
        cli: dict[str, list[float]] = {FLAT: [], "l2": []}
        lib: dict[str, list[float]] = {FLAT: [], "l2": []}
        verify: dict[str, list[float]] = {FLAT: [], "l2": []}
        for tag in (FLAT, "l2"):  # warm-up: page cache, QEMU binary, the store's database
            cli_fork_s(home, tag, args.children)
        for round_ in range(args.runs):  # each round forks both, in alternating order
            order = (FLAT, "l2") if round_ % 2 == 0 else ("l2", FLAT)
            for tag in order:
                cli[tag].append(cli_fork_s(home, tag, args.children))
            for tag in order:
                seconds, verify_ms = library_fork_s(home, tag, args.children)
                lib[tag].append(seconds)
                verify[tag].append(verify_ms)
        med = {k: {t: statistics.median(v) for t, v in d.items()} for k, d in (("cli", cli), ("lib", lib))}
        # the ratio is the median of each round's chain/flat: the two forks of a round ran back to back,
        # so load from other processes on the machine mostly cancels out
        ratio = {
            k: statistics.median(c / f for f, c in zip(d[FLAT], d["l2"], strict=True))
            for k, d in (("cli", cli), ("lib", lib))
        }
        print(
            f"guest {args.mem_mib} MiB, accel tcg, {args.children} child(ren) per fork; chain base -> l1 -> l2 "
            f"vs {FLAT} (compacted from l2, same memory.bin); built in {build_s:.1f} s; median of {args.runs}"
        )
        print(f"{'path':<44} {'flat':>10} {'depth 3':>10} {'ratio':>7}")
        for name, key in (
            ("forkd fork (CLI process, start to exit)", "cli"),
            ("vmops.fork (library, until answered)", "lib"),
        ):
            f, c = med[key][FLAT], med[key]["l2"]
            print(f"{name:<44} {f * 1000:>7.0f} ms {c * 1000:>7.0f} ms {ratio[key]:>6.2f}x")
        vf, vc = statistics.median(verify[FLAT]), statistics.median(verify["l2"])
        print(f"{'  of which verify_chain':<44} {vf:>7.2f} ms {vc:>7.2f} ms")
        print(
            f"ratio depth-3 / flat (median of the rounds' ratios): {ratio['cli']:.2f}x (CLI), "
            f"{ratio['lib']:.2f}x (library); goal <= 1.10x"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
