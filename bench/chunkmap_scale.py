#!/usr/bin/env python3
"""Chunk-map size and parse time for a 16 GiB base, against a 512 MiB one and a plain JSON decode.

Usage: python bench/chunkmap_scale.py [--data-fraction 0.25] [--repeat 5]

A base's chunk map lists every non-zero chunk (index, chunk digest, blob, offset, length). This
builds synthetic maps (random digests, frames of ~40 KiB back to back in one blob) for a 512 MiB
and a 16 GiB memory.bin with --data-fraction of their 64 KiB chunks non-zero, and for the 16 GiB
one with every chunk non-zero (the worst case), then times, median of --repeat:
``ChunkMap.to_json`` (canonical JSON), ``ChunkMap.from_json`` (parse and validate, what the hub
and the client do), and as peers in the same run ``json.loads`` and ``msgspec.json.decode`` of
the same bytes (decoding alone, no validation). Issue 15 asks that the 16 GiB case cost within
1.2x of 32x the 512 MiB one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, median, print_table  # noqa: E402

from manifest import mediatypes as mt  # noqa: E402
from manifest.model import ChunkEntry, ChunkMap  # noqa: E402

CHUNK = 64 * 1024


def synthetic_map(size: int, fraction: float) -> ChunkMap:
    count = size // CHUNK
    step = max(1, round(1 / fraction)) if fraction < 1 else 1
    entries, offset = [], 0
    for index in range(0, count, step):
        length = 40_000 + index % 5000
        entries.append(ChunkEntry(index, "blake3:" + os.urandom(32).hex(), 0, offset, length))
        offset += length
    return ChunkMap(
        mt.MEMORY_FILE,
        size,
        CHUNK,
        "blake3:" + os.urandom(32).hex(),
        None,
        ("sha256:" + os.urandom(32).hex(),),
        tuple(entries),
    )


def timed(fn, repeat: int) -> float:  # noqa: ANN001
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-fraction", type=float, default=0.25)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cases = [
        ("512 MiB", 512 << 20, args.data_fraction),
        ("16 GiB", 16 << 30, args.data_fraction),
        ("16 GiB, all data", 16 << 30, 1.0),
    ]
    rows, results = [], {}
    for name, size, fraction in cases:
        cmap = synthetic_map(size, fraction)
        data = cmap.to_json()
        encode = timed(cmap.to_json, args.repeat)
        parse = timed(lambda: ChunkMap.from_json(data, limit=1 << 30), args.repeat)
        stdlib = timed(lambda: json.loads(data), args.repeat)
        fast = timed(lambda: msgspec.json.decode(data), args.repeat)
        results[name] = (len(data), parse)
        rows.append(
            [
                name,
                f"{len(cmap.entries):,}",
                f"{len(data) / 2**20:.1f}",
                f"{encode * 1e3:.1f}",
                f"{parse * 1e3:.1f}",
                f"{stdlib * 1e3:.1f}",
                f"{fast * 1e3:.1f}",
                f"{parse / fast:.1f}x",
            ]
        )
    print(f"chunkmap_scale: synthetic base chunk maps, 64 KiB chunks, median of {args.repeat}; {MACHINE_NOTE}")
    print_table(
        [
            "memory.bin",
            "entries",
            "MiB JSON",
            "to_json ms",
            "from_json ms",
            "json.loads ms",
            "msgspec ms",
            "from_json / msgspec",
        ],
        rows,
    )
    small, big = results["512 MiB"], results["16 GiB"]
    print(
        f"16 GiB / (32 x 512 MiB): size {big[0] / (32 * small[0]):.2f}x, parse {big[1] / (32 * small[1]):.2f}x "
        f"(goal <= 1.2x); chunk-map limit {64} MiB (FORKD_HUB_CHUNK_MAP_BYTES)"
    )


if __name__ == "__main__":
    main()
