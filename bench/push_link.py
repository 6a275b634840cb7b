#!/usr/bin/env python3
"""Push of a new child link whose parent is already on the hub: what it costs the client to name files.

Usage: python bench/push_link.py [--mem-mib 512] [--data-fraction 0.5] [--dirty 0.03] [--repeat 3] [--dir DIR]

A base (``--mem-mib`` memory.bin, ``--data-fraction`` of it data, the rest holes) is pushed to a
fresh hub; then, ``--repeat`` times, a new child of that base (``--dirty`` of the image rewritten
in 64 KiB runs) is imported with ``forkd import --parent base`` and pushed with ``forkd push``
(a CLI process, start-up included, timed after a ``sync``). A format-v2 layer names each file by
its chunk tree, so a push must hash the child's memory.bin once; the parent's tree is known
already (the verified record keeps it since the base was pushed) unless the client forgot it.
Peers in the same run: the chunk tree of one memory.bin computed in memory-speed Python
(``manifest.chunktree.file_chunk_tree``, page-cached file), the least a push of a new file must
hash; and the same push with the chunk trees cleared from the client's verified record before it
(the parent's tree is computed again, as every push did before the record kept chunk trees).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, MiB, median, print_table, timed  # noqa: E402
from images import make_child_image, make_memory_image, make_vmstate  # noqa: E402
from procs import ForkdUser, HubServer, log_summary  # noqa: E402

from manifest.chunktree import file_chunk_tree  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mem-mib", type=int, default=512)
    ap.add_argument("--data-fraction", type=float, default=0.5)
    ap.add_argument("--dirty", type=float, default=0.03)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    size = args.mem_mib * MiB

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="push-link-") as tmp:
        root = Path(tmp)
        base = root / "base"
        base.mkdir()
        make_memory_image(base / "memory.bin", size, int(size * args.data_fraction), seed=1)
        make_vmstate(base / "vmstate", seed=1)
        with HubServer(root / "hub", root / "hub.log") as hub:
            user = ForkdUser(root / "alice", hub.url, hub.token("alice", "push:acme/*"))
            user.run("import", str(base), "base")
            user.json("push", "base", "acme/vm:v1")
            warm, cold, sent, tree = [], [], [], []
            for i in range(2 * args.repeat):
                child = root / f"child{i}"
                child.mkdir()
                make_child_image(base / "memory.bin", child / "memory.bin", args.dirty, seed=100 + i)
                make_vmstate(child / "vmstate", seed=100 + i)
                user.run("import", str(child), f"child{i}", "--parent", "base")
                t = time.perf_counter()
                file_chunk_tree(user.home / "snapshots" / f"child{i}" / "memory.bin", 65536)
                tree.append(time.perf_counter() - t)
                forget = i % 2 == 1  # alternate: trees kept / trees cleared
                if forget:
                    with sqlite3.connect(user.home / "verified.db") as db:
                        db.execute("UPDATE verified SET chunk_tree = NULL")
                reports: list[dict] = []
                seconds = timed(lambda i=i: reports.append(user.json("push", f"child{i}", f"acme/vm:c{i}")))
                (cold if forget else warm).append(seconds)
                sent.append(reports[0].get("bytes_sent", 0))
        logs = log_summary(hub=root / "hub.log")

    print(
        f"push_link: new child of a pushed base, memory.bin {args.mem_mib} MiB, {args.data_fraction:.0%} data, "
        f"{args.dirty:.0%} rewritten; median of {args.repeat}; {MACHINE_NOTE}"
    )
    t_tree, t_warm, t_cold = median(tree), median(warm), median(cold)
    print_table(
        ["operation", "runs (s)", "median s", "vs one chunk tree"],
        [
            [
                "chunk tree of the child's memory.bin (in process)",
                "/".join(f"{x:.2f}" for x in tree),
                f"{t_tree:.3f}",
                "1.00x",
            ],
            [
                "forkd push child (chunk trees kept)",
                "/".join(f"{x:.2f}" for x in warm),
                f"{t_warm:.3f}",
                f"{t_warm / t_tree:.2f}x",
            ],
            [
                "forkd push child (chunk trees cleared first)",
                "/".join(f"{x:.2f}" for x in cold),
                f"{t_cold:.3f}",
                f"{t_cold / t_tree:.2f}x",
            ],
        ],
    )
    print(f"trees cleared / kept: {t_cold / t_warm:.2f}x; bytes sent per push: {sorted(sent)}")
    print(logs)


if __name__ == "__main__":
    main()
