#!/usr/bin/env python3
"""Chunk + hash + diff throughput on a sparse 1 GiB image, against blake3's raw speed on the same bytes.

Usage: python bench/chunk_diff.py [--size-mib 1024] [--data-fraction 0.5] [--change-fraction 0.03] [--dir DIR]

The image is half data (random and compressible pages) and half holes, like a warm guest's
memory.bin; the child differs from it in --change-fraction of its data chunks. Every number is
measured in this run; ratios compare against blake3 hashing the same data bytes in memory.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import blake3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manifest.chunking import DEFAULT_CHUNK_SIZE, iter_nonzero_chunks  # noqa: E402
from manifest.diff import diff_files  # noqa: E402
from manifest.layer import LayerBuilder  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


def make_images(root: Path, size: int, data_fraction: float, change_fraction: float) -> tuple[Path, Path, int]:
    rng = random.Random(42)
    cs = DEFAULT_CHUNK_SIZE
    parent, child = root / "parent.bin", root / "child.bin"
    block = 4 * MiB
    nblocks = size // block
    data_blocks = sorted(rng.sample(range(nblocks), int(nblocks * data_fraction)))
    text = (b"def forkd_hub(snapshot):\n    return chain\n" * 100000)[:block]
    data_bytes = 0
    with open(parent, "wb") as p, open(child, "wb") as c:
        p.truncate(size)
        c.truncate(size)
        for i, b in enumerate(data_blocks):
            payload = os.urandom(block) if i % 2 else text
            p.seek(b * block)
            p.write(payload)
            changed = bytearray(payload)
            for k in range(0, block, cs):
                if rng.random() < change_fraction:
                    changed[k + 100 : k + 200] = os.urandom(100)
            c.seek(b * block)
            c.write(changed)
            data_bytes += block
    return parent, child, data_bytes


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--data-fraction", type=float, default=0.5)
    ap.add_argument("--change-fraction", type=float, default=0.03)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write the two images (default: a temp dir)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        parent, child, data_bytes = make_images(root, args.size_mib * MiB, args.data_fraction, args.change_fraction)
        with open(child, "rb") as f:  # the same data bytes, in memory, for the raw blake3 peers
            buf = f.read()
        data_only = b"".join(
            buf[o : o + DEFAULT_CHUNK_SIZE]
            for o in range(0, len(buf), DEFAULT_CHUNK_SIZE)
            if buf[o : o + DEFAULT_CHUNK_SIZE].count(0) != DEFAULT_CHUNK_SIZE
        )
        del buf

        raw1 = timed(lambda: blake3.blake3(data_only).digest(), args.repeat)
        rawN = timed(lambda: blake3.blake3(data_only, max_threads=blake3.blake3.AUTO).digest(), args.repeat)
        raw_chunks = timed(
            lambda: [
                blake3.blake3(data_only[o : o + DEFAULT_CHUNK_SIZE]).digest()
                for o in range(0, len(data_only), DEFAULT_CHUNK_SIZE)
            ],
            args.repeat,
        )

        def chunk_and_hash() -> None:
            for _, piece in iter_nonzero_chunks(child):
                blake3.blake3(piece).digest()

        def diff() -> None:
            for _ in diff_files(parent, child):
                pass

        changed = sum(1 for _ in diff_files(parent, child))
        t_chunk = timed(chunk_and_hash, args.repeat)
        t_diff = timed(diff, args.repeat)

        def build_child_layer() -> None:
            b = LayerBuilder(root / "blobs")
            b.add_file(
                "memory.bin",
                diff_files(parent, child),
                size=os.path.getsize(child),
                chunk_size=DEFAULT_CHUNK_SIZE,
                digest="blake3:" + "0" * 64,
                parent_digest="blake3:" + "0" * 64,
            )
            b.finish()

        t_layer = timed(build_child_layer, args.repeat)

    def rate(seconds: float, nbytes: int) -> float:
        return nbytes / seconds / GiB

    print(
        f"image: {args.size_mib} MiB apparent, {data_bytes / MiB:.0f} MiB data, chunk {DEFAULT_CHUNK_SIZE // 1024} KiB, "
        f"{changed} changed chunks ({args.change_fraction:.0%} target), median of {args.repeat}"
    )
    print(f"{'operation':<46}{'seconds':>9}{'GiB/s data':>12}{'GiB/s apparent':>16}{'vs blake3 1-thread':>20}")
    rows = [
        ("blake3 raw, data bytes in memory, 1 thread", raw1, 1),
        ("blake3 raw, data bytes in memory, all cores", rawN, 1),
        ("blake3 raw, per 64 KiB chunk, in memory", raw_chunks, 1),
        ("chunk + hash (sparse read from file)", t_chunk, 1),
        ("diff parent vs child (reads both files)", t_diff, 2),
        ("diff + zstd frames into a data blob", t_layer, 2),
    ]
    for name, seconds, _files in rows:
        print(
            f"{name:<46}{seconds:>9.3f}{rate(seconds, data_bytes):>12.2f}{rate(seconds, args.size_mib * MiB):>16.2f}"
            f"{raw1 / seconds:>19.2f}x"
        )


if __name__ == "__main__":
    main()
