"""What forkd's hole rule costs a link's install, against the hashing the install already does.

    python bench/hole_rule.py [--mem-mib 256] [--zeroed 0.1] [--runs 3] [--dir DIR]

forkd's daemon reads a hole in a link's memory.bin as "keep the parent's bytes", so every
writer of a link makes the holes over non-zero parent bytes real zeros
(``manifest.holes.fill_unsafe_holes``, docs/decisions/0006). Here a parent of ``--mem-mib``
(every other 64 KiB chunk random data, the rest holes) and a link that zeroes ``--zeroed`` of the
parent's data chunks as holes (what a sparse copy or a VMM punching freed pages leaves) are
written; then, in the same run, on the same files:

* **hash**: blake3 + sha256 of the link in one pass (what ``import`` pays for every file anyway);
* **fill**: ``fill_unsafe_holes(link, parent)``: find the link's holes over parent data, write zeros.

Prints the median of ``--runs`` (a fresh link each run) and the ratio fill / hash.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manifest.digest import digest_file
from manifest.holes import fill_unsafe_holes, unsafe_holes

CHUNK = 64 << 10


def write_pair(directory: Path, size: int, zeroed: float, seed: int) -> tuple[Path, Path]:
    rng = random.Random(seed)
    parent, link = directory / "parent.bin", directory / "link.bin"
    if not parent.exists():
        with open(parent, "wb") as f:
            f.truncate(size)
            for i in range(0, size // CHUNK, 2):
                f.seek(i * CHUNK)
                f.write(rng.randbytes(CHUNK))
    link.unlink(missing_ok=True)
    with open(parent, "rb") as src, open(link, "wb") as f:
        f.truncate(size)
        for i in range(0, size // CHUNK, 2):
            if rng.random() < zeroed:
                continue  # zeroed in the link: left as a hole
            src.seek(i * CHUNK)
            f.seek(i * CHUNK)
            f.write(src.read(CHUNK))
    os.sync()
    return parent, link


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mem-mib", type=int, default=256)
    ap.add_argument("--zeroed", type=float, default=0.1, help="share of the parent's data chunks the link zeroes")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, help="scratch directory (default: a temp dir, removed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hole-rule-", dir=args.dir))
    try:
        hashes, fills, written = [], [], 0
        for run in range(args.runs):
            parent, link = write_pair(work, args.mem_mib << 20, args.zeroed, seed=run)
            started = time.perf_counter()
            digest_file(link, ("blake3", "sha256"))
            hashes.append(time.perf_counter() - started)
            started = time.perf_counter()
            written = fill_unsafe_holes(link, parent)
            fills.append(time.perf_counter() - started)
            assert unsafe_holes(link, parent) == []
        hash_ms, fill_ms = statistics.median(hashes) * 1000, statistics.median(fills) * 1000
        print(
            f"link: {args.mem_mib} MiB memory.bin, {args.zeroed:.0%} of the parent's data chunks zeroed as holes "
            f"({written / 2**20:.1f} MiB of real zeros written); median of {args.runs}"
        )
        print(f"{'step':<40}{'ms':>10}")
        print(f"{'hash: blake3 + sha256 of the link':<40}{hash_ms:>10.1f}")
        print(f"{'fill: fill_unsafe_holes(link, parent)':<40}{fill_ms:>10.1f}")
        print(f"ratio fill/hash: {fill_ms / hash_ms:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
