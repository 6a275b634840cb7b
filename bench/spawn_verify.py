"""Spawn-time chain verification cost per link: forkd's re-hash vs our verified record.

    python bench/spawn_verify.py [--depth 3] [--mem-mib 512] [--runs 5] [--dir DIR]

Builds a chain of ``--depth`` snapshots (base + links) with the local store: each memory.bin
is ``--mem-mib`` sparse with half of it data (alternating 4 MiB data / 4 MiB hole, random
bytes), each link a clone of its parent with ~1% of its data chunks rewritten. Then, on the
same files, in the same run:

* **forkd** (reference forkd-formats.md §2.3, ``verify_parent_hashes``): on every spawn, for
  every adjacent pair, stream SHA-256 over the parent's whole memory.bin with a 1 MiB buffer
  and compare it with the child's ``parent_content_hash``;
* **ours** (``SnapshotStore.verify_chain``): resolve the chain and look every parent up in the
  VerifiedRecord (stat + one SQLite row; nothing is read while the file is unchanged), measured
  in an open store and with a freshly opened store (what one ``forkd fork`` process pays).

Prints the median of ``--runs`` spawns as ms per verified link (a chain of depth d has d-1
parent checks) and the ratio forkd / ours. Files are in the page cache (just written), which
is forkd's best case: a cold cache makes its re-hash slower still.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from forkd_client.store import SnapshotStore
from manifest.fileops import clone_file

MIB = 1 << 20
BLOCK = 4 * MIB
CHUNK = 64 * 1024


def build_chain(root: Path, depth: int, mem_mib: int) -> list[str]:
    """Install base, l1, … into the store at ``root``; return the tags base first."""
    rng = random.Random(7)
    sources = root / "sources"
    tags = [f"l{i}" if i else "base" for i in range(depth)]
    with SnapshotStore(root / "store", durable=False) as store:
        previous: Path | None = None
        for i, tag in enumerate(tags):
            src = sources / tag
            src.mkdir(parents=True)
            memory = src / "memory.bin"
            if previous is None:
                with open(memory, "wb") as f:
                    f.truncate(mem_mib * MIB)
                    for offset in range(0, mem_mib * MIB, 2 * BLOCK):  # data, hole, data, hole …
                        f.seek(offset)
                        f.write(os.urandom(BLOCK))
            else:
                clone_file(previous, memory)
                with open(memory, "r+b") as f:
                    data_chunks = [o for o in range(0, mem_mib * MIB, CHUNK) if (o // BLOCK) % 2 == 0]
                    for offset in rng.sample(data_chunks, len(data_chunks) // 100):
                        f.seek(offset)
                        f.write(os.urandom(CHUNK))
            (src / "vmstate").write_bytes(os.urandom(60_000))
            store.import_snapshot(src, tag, parent=tags[i - 1] if i else None, move=True)
            previous = store.path(tag) / "memory.bin"
    shutil.rmtree(sources)
    return tags


def forkd_verify(store_root: Path, tags: list[str]) -> None:
    """forkd's verify_parent_hashes: stream-SHA-256 every parent, compare with the child's record."""
    for parent, child in itertools.pairwise(tags):
        doc = json.loads((store_root / "snapshots" / child / "snapshot.json").read_text())
        parent_doc = json.loads((store_root / "snapshots" / parent / "snapshot.json").read_text())
        h = hashlib.sha256()
        with open(parent_doc["memory"], "rb") as f:
            buf = bytearray(MIB)
            view = memoryview(buf)
            while n := f.readinto(buf):
                h.update(view[:n])
        if h.hexdigest() != doc["parent_content_hash"]:
            raise SystemExit(f"forkd check failed on {child}: parent {parent} changed")


def median_ms(func, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        func()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=3, help="snapshots in the chain, base included (default 3)")
    parser.add_argument("--mem-mib", type=int, default=512)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    if args.depth < 2:
        parser.error("--depth must be at least 2 (a base and one link)")
    root = Path(tempfile.mkdtemp(prefix="spawn-verify-", dir=args.dir))
    try:
        started = time.perf_counter()
        tags = build_chain(root, args.depth, args.mem_mib)
        build_s = time.perf_counter() - started
        store_root = root / "store"
        links = len(tags) - 1
        forkd_ms = median_ms(lambda: forkd_verify(store_root, tags), args.runs)
        with SnapshotStore(store_root) as store:
            store.verify_chain(tags[-1])  # warm the connection; the records were written at install
            ours_open_ms = median_ms(lambda: store.verify_chain(tags[-1]), args.runs)

        def fresh() -> None:
            with SnapshotStore(store_root) as s:
                s.verify_chain(tags[-1])

        ours_fresh_ms = median_ms(fresh, args.runs)
        data_mib = sum((store_root / "snapshots" / t / "memory.bin").stat().st_blocks * 512 for t in tags) / MIB
        print(
            f"chain: {' -> '.join(tags)}; memory.bin {args.mem_mib} MiB each, "
            f"{data_mib / len(tags):.0f} MiB data each; built in {build_s:.1f} s; median of {args.runs} spawns"
        )
        print(f"{'method':<46} {'ms/link':>10} {'ms/spawn':>10}")
        rows = [
            ("forkd: stream SHA-256 of every parent (1 MiB)", forkd_ms),
            ("ours: verified record, open store", ours_open_ms),
            ("ours: verified record, store opened per spawn", ours_fresh_ms),
        ]
        for name, ms in rows:
            print(f"{name:<46} {ms / links:>10.3f} {ms:>10.3f}")
        print(
            f"ratio forkd/ours: {forkd_ms / ours_open_ms:,.0f}x (open store), "
            f"{forkd_ms / ours_fresh_ms:,.0f}x (store opened per spawn)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
