#!/usr/bin/env python3
"""The redirected pull's receive path alone: presigned ranged GETs from a real SeaweedFS read by
HubClient through storeget.StoreReader (http.client, one buffer per body) vs through httpx (the
path before, still used with a proxy or an injected client), interleaved in one process.

Usage: python bench/store_ranges.py [--object-mib 64] [--range-mib 4] [--threads 8] [--rounds 3]

Each round GETs every --range-mib range of a random --object-mib object four times over, on
--threads threads (the pull's piece workers: 8 at most, 4 MiB pieces), once per path, the two
paths alternating. Reported: wall seconds and the process's CPU seconds (user + system; the store
is another process) per path, medians over the rounds, and httpx / StoreReader ratios (> 1: the
StoreReader path is cheaper). Every body is compared with the object.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import MACHINE_NOTE, MiB, print_table  # noqa: E402

from forkd_client.hub.client import HubClient  # noqa: E402
from tests.services.seaweedfs import SeaweedFS  # noqa: E402


def one_round(client: HubClient, url: str, data: bytes, range_bytes: int, threads: int) -> tuple[float, float]:
    """(wall s, CPU s) of GETting every range of ``url`` four times over on ``threads`` threads."""
    spans = [(s, min(s + range_bytes, len(data))) for s in range(0, len(data), range_bytes)] * 4

    def get(span: tuple[int, int]) -> None:
        body = client.store_range(url, span[0], span[1], "sha256:" + "0" * 64)
        if bytes(body[:64]) != data[span[0] : span[0] + 64] or len(body) != span[1] - span[0]:
            raise SystemExit(f"store_ranges: wrong bytes for {span}")

    wall, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(get, spans))
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--object-mib", type=int, default=64)
    ap.add_argument("--range-mib", type=int, default=4)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    weed = SeaweedFS()
    weed.start()
    try:
        s3 = weed.client()
        data = os.urandom(args.object_mib * MiB)
        s3.put_object(Bucket=weed.bucket, Key="store-ranges/object", Body=data)
        url = s3.generate_presigned_url(
            "get_object", Params={"Bucket": weed.bucket, "Key": "store-ranges/object"}, ExpiresIn=900
        )
        direct = HubClient("http://127.0.0.1:9")  # never asked: only store ranges are read
        via_httpx = HubClient("http://127.0.0.1:9")
        via_httpx._store = None  # the httpx path, as with a proxy configured
        times: dict[str, list[tuple[float, float]]] = {"StoreReader": [], "httpx": []}
        load = os.getloadavg()[0]
        for _ in range(args.rounds):
            for name, client in (("httpx", via_httpx), ("StoreReader", direct)):
                times[name].append(one_round(client, url, data, args.range_mib * MiB, args.threads))
        direct.close()
        via_httpx.close()
    finally:
        weed.stop()
    moved = 4 * args.object_mib
    print(
        f"store_ranges: {moved} MiB as {args.range_mib} MiB ranged GETs on {args.threads} threads, "
        f"{args.rounds} rounds, load average {load:.1f}; {MACHINE_NOTE}"
    )
    med = {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in times.items()}
    rows = [[name, f"{w:.2f}", f"{c:.2f}", f"{moved / w:.0f}"] for name, (w, c) in med.items()]
    print_table(["receive path (medians)", "wall s", "client CPU s", "MiB/s"], rows)
    print(
        f"httpx / StoreReader: wall {med['httpx'][0] / med['StoreReader'][0]:.2f}x, "
        f"client CPU {med['httpx'][1] / med['StoreReader'][1]:.2f}x"
    )


if __name__ == "__main__":
    main()
