"""Cold chain pulls by two source trees of forkd, side by side on one hub: a before/after of a
client change that a busy machine's noise would hide between separate runs.

Usage: python bench/pull_trees.py --other TREE [--repeat 5] [--warmup 1] [--mem-mib 512]
                                  [--data-fraction 0.5] [--dirty 0.03] [--dir DIR]

The chain is bench/chain_pull_vs_skopeo.py's (a base of --mem-mib, --data-fraction of it data,
two links rewriting --dirty each), pushed once to one ``forkd-hub serve`` (run from this tree).
Then cold ``forkd pull``s into empty stores alternate between this tree and --other (a checkout
of the commit to compare, e.g. ``git archive <commit> | tar -x -C DIR``), each with its tree on
PYTHONPATH, each after a ``sync``; the first --warmup rounds are not counted and the order flips
every round. Client CPU is the user + system time of the ``forkd`` process. Ratios are
other / this tree, measured in this run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chain_pull_vs_skopeo import import_chain, make_chain  # noqa: E402
from common import MACHINE_NOTE, ROOT, MiB, fmt_runs, median, print_table, timed_cpu  # noqa: E402
from procs import ForkdUser, HubServer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--other", required=True, help="the source tree to compare this one with")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (both trees)")
    ap.add_argument("--mem-mib", type=int, default=512, help="apparent size of each memory.bin")
    ap.add_argument("--data-fraction", type=float, default=0.5, help="share of the base that holds data")
    ap.add_argument("--dirty", type=float, default=0.03, help="share of the image each link rewrites")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    trees = {"this tree": str(ROOT), "other tree": str(Path(args.other).resolve())}
    if not (Path(trees["other tree"]) / "forkd_client").is_dir():
        sys.exit(f"--other {args.other}: not a forkd source tree (no forkd_client/ in it)")
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="pull-trees-") as tmp:
        root = Path(tmp)
        chain = make_chain(root, args.mem_mib * MiB, args.data_fraction, args.dirty, 0)
        with HubServer(root / "hub", root / "hub.log") as hub:
            pusher = ForkdUser(root / "pusher", hub.url, hub.token("pusher", "push:acme/*"))
            import_chain(pusher, chain)
            pusher.json("push", "link2", "acme/chain:v1", "--public")
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for i in range(args.warmup + args.repeat):
                order = list(trees.items()) if i % 2 else list(trees.items())[::-1]
                for name, tree in order:
                    user = ForkdUser(root / f"puller{i}-{len(runs[name])}-{name[0]}", hub.url)
                    env = {"PYTHONPATH": tree}
                    timing = timed_cpu(lambda u=user, e=env: u.run("pull", "acme/chain:v1", "--as", "head", env=e))
                    if i >= args.warmup:
                        runs[name].append(timing)
                    shutil.rmtree(user.root)
    loads.append(os.getloadavg()[0])
    wall = {name: [w for w, _ in r] for name, r in runs.items()}
    cpu = {name: [c for _, c in r] for name, r in runs.items()}
    print(
        f"pull_trees: cold pulls of a 3-link chain of {args.mem_mib} MiB images, {args.data_fraction:.0%} data, "
        f"links rewrite {args.dirty:.0%}; this tree {trees['this tree']}, other {trees['other tree']}; "
        f"median of {args.repeat} after {args.warmup} untimed round(s); load {loads[0]:.1f} -> {loads[1]:.1f}; "
        f"{MACHINE_NOTE}\n"
    )
    rows: list[list[object]] = [
        [f"forkd pull ({name})", fmt_runs(wall[name]), f"{median(wall[name]):.2f}", f"{median(cpu[name]):.2f}"]
        for name in trees
    ]
    rows.append(
        [
            "other / this",
            "",
            f"{median(wall['other tree']) / median(wall['this tree']):.2f}x",
            f"{median(cpu['other tree']) / median(cpu['this tree']):.2f}x",
        ]
    )
    print_table(["cold chain pull", "runs (s)", "median s", "client CPU s"], rows)


if __name__ == "__main__":
    main()
