"""What the hub's push-time proof of a format-v2 file digest costs, against hashing the file's bytes.

    python bench/file_digest_proof.py [--size-gib 16] [--changed 0.1] [--runs 3]

A v2 file digest is a chunk tree (manifest/chunktree.py), so the hub proves a pushed link's
declared digest from chunk digests it already verified (hub_server/registry/push/filetrees.py), never
reading the data: parse the link's chunk map, apply it to the parent's chunk list, hash the list.
Here a parent of ``--size-gib`` (every 64 KiB chunk non-zero) and a link changing ``--changed``
of its chunks are made up; in the same run:

* **proof**: ``ChunkMap.from_json`` of the link's map + ``apply_map`` + ``digest()`` (what a push pays
  with the parent's list cached, e.g. a chain pushed link by link);
* **cold proof**: the same after rebuilding the parent's list from the base's chunk map, which lists
  every chunk (what the first push of a child pays after a hub restart);
* **hash**: blake3 (all threads) over the same number of bytes, measured on a 256 MiB buffer in
  memory and scaled: a lower bound of what any check reading the data would pay (no disk, no store).

Prints the median of ``--runs`` and the ratio proof / hash.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import blake3

from manifest import mediatypes as mt
from manifest.chunktree import ChunkList, apply_map
from manifest.model import ChunkEntry, ChunkMap

CHUNK = 64 << 10
SAMPLE = 256 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-gib", type=float, default=16.0, help="the file's size in GiB (default 16)")
    parser.add_argument("--changed", type=float, default=0.1, help="fraction of chunks the link changes (default 0.1)")
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is printed (default 3)")
    args = parser.parse_args()
    size = int(args.size_gib * (1 << 30)) // CHUNK * CHUNK
    count = size // CHUNK
    parent = ChunkList(size, CHUNK, b"".join(blake3.blake3(i.to_bytes(8, "little")).digest() for i in range(count)))
    step = max(1, round(1 / args.changed)) if args.changed > 0 else count + 1
    entries = tuple(
        ChunkEntry(i, "blake3:" + blake3.blake3(b"new" + i.to_bytes(8, "little")).hexdigest(), 0, i * 100, 100)
        for i in range(0, count, step)
    )
    child = apply_map(parent, ((e.index, e.digest) for e in entries), size, CHUNK)
    raw = ChunkMap(
        mt.MEMORY_FILE, size, CHUNK, child.digest(), parent.digest(), ("sha256:" + "0" * 64,), entries
    ).to_json()

    base_entries = tuple(ChunkEntry(i, "blake3:" + parent[i].hex(), 0, i * 100, 100) for i in range(count))
    base_raw = ChunkMap(
        mt.MEMORY_FILE, size, CHUNK, parent.digest(), None, ("sha256:" + "0" * 64,), base_entries
    ).to_json()

    proofs, colds, hashes = [], [], []
    buffer = os.urandom(SAMPLE)
    for _ in range(args.runs):
        start = time.perf_counter()
        chunk_map = ChunkMap.from_json(raw, limit=len(raw))
        proven = apply_map(parent, ((e.index, e.digest) for e in chunk_map.entries), chunk_map.size, CHUNK).digest()
        proofs.append(time.perf_counter() - start)
        assert proven == chunk_map.digest
        start = time.perf_counter()
        base = ChunkMap.from_json(base_raw, limit=len(base_raw))
        rebuilt = apply_map(None, ((e.index, e.digest) for e in base.entries), size, CHUNK)
        assert rebuilt.digest() == base.digest
        chunk_map = ChunkMap.from_json(raw, limit=len(raw))
        apply_map(rebuilt, ((e.index, e.digest) for e in chunk_map.entries), chunk_map.size, CHUNK).digest()
        colds.append(time.perf_counter() - start)
        start = time.perf_counter()
        blake3.blake3(buffer, max_threads=blake3.blake3.AUTO).digest()
        hashes.append((time.perf_counter() - start) * size / SAMPLE)
    proof, cold, hashed = statistics.median(proofs), statistics.median(colds), statistics.median(hashes)
    print(
        f"file {size / (1 << 30):.1f} GiB, {count} chunks, link changes {len(entries)} "
        f"(chunk map {len(raw) / (1 << 20):.1f} MiB); median of {args.runs} runs"
    )
    print(f"proof (parse map + apply + chunk-tree digest): {proof * 1000:8.1f} ms")
    print(f"cold proof (+ the base's full map)            : {cold * 1000:8.1f} ms")
    print(f"hash the file's bytes (blake3, in memory)     : {hashed * 1000:8.1f} ms")
    print(f"ratio proof / hash: {proof / hashed:.3f}; cold proof / hash: {cold / hashed:.3f}")


if __name__ == "__main__":
    main()
