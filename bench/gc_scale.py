#!/usr/bin/env python3
"""Garbage collection of a hub holding many layers: how long a run takes as the hub grows.

Usage: python bench/gc_scale.py [--layers 1000] [--chain 10] [--dir DIR]

The real app in process (Litestar's TestClient; SQLite and the filesystem store in a temp dir)
receives --layers format-v2 layers, pushed as chains of --chain links, one chain per repository
and each link tagged (a 256 KiB memory image per link, its chunks all new: one recipe, one pack
and its frames per layer). Then, timed:

1. ``gc`` with everything referenced (the mark over every layer, nothing to sweep);
2. half of the repositories deleted with ``?cascade=true`` (their chains unlinked), then ``gc``
   with a zero grace period, which sweeps what became unreferenced at once (manifests, blobs,
   packs, frames, chunk rows);
3. ``gc`` once more (nothing left to sweep).

Peer in the same run: listing every object of the blob store (``BlobStore.list``), the least a
collector that checks the store for orphans must do. Goal (issue 15): under a minute for 1,000
layers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import MACHINE_NOTE, print_table  # noqa: E402
from litestar.testing import TestClient  # noqa: E402

from hub_server.app import create_app  # noqa: E402
from hub_server.settings import Settings  # noqa: E402
from tests.hub_server.pushing import PushClient, auth, check  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=1000)
    ap.add_argument("--chain", type=int, default=10)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    repos = -(-args.layers // args.chain)

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="gc-scale-") as tmp:
        root = Path(tmp)
        settings = Settings.for_data_dir(root / "hub")
        with TestClient(create_app(settings)) as client:
            token = client.app.state.tokens
            admin = client.blocking_portal.call(lambda: token.create("admin", ["admin"], None))
            pusher = PushClient(client, admin)
            t = time.perf_counter()
            for r in range(repos):
                parent = None
                for link in range(min(args.chain, args.layers - r * args.chain)):
                    memory = root / "work" / f"m{r}-{link}.bin"
                    memory.parent.mkdir(exist_ok=True)
                    memory.write_bytes(os.urandom(256 * 1024))
                    work = root / "work" / f"l{r}-{link}"
                    work.mkdir()
                    layer = pusher.build_layer(f"acme/r{r}", memory, f"vmstate {r} {link}".encode(), work, parent)
                    pusher.push_layer(f"acme/r{r}", layer, f"v{link}")
                    parent = layer
            push_s = time.perf_counter() - t
            gc = client.app.state.registry.gc
            store = client.app.state.store

            async def list_store() -> int:
                return sum([1 async for _ in store.list("")])

            def timed(fn):  # noqa: ANN001, ANN202
                t = time.perf_counter()
                result = client.blocking_portal.call(fn)
                return time.perf_counter() - t, result

            list_s, objects = timed(list_store)
            mark_s, first = timed(lambda: gc.run(grace=timedelta(0)))
            for r in range(0, repos, 2):
                check(
                    client.delete(f"/v2/acme/r{r}/manifests/v0", params={"cascade": "true"}, headers=auth(admin)), 202
                )
            unmark_s, second = timed(lambda: gc.run(grace=timedelta(0)))
            sweep_s, third = timed(lambda: gc.run(grace=timedelta(0)))

    print(
        f"gc_scale: {args.layers} layers in {repos} chains of {args.chain} (256 KiB memory each), {objects} objects "
        f"in the store; pushed in {push_s:.0f} s; {MACHINE_NOTE}"
    )
    print_table(
        ["operation", "seconds", "deleted manifests", "deleted blobs", "vs listing the store"],
        [
            ["list every object of the blob store", f"{list_s:.2f}", "", "", "1.00x"],
            [
                "gc, everything referenced",
                f"{mark_s:.2f}",
                len(first.manifests),
                len(first.blobs),
                f"{mark_s / list_s:.1f}x",
            ],
            [
                "gc after deleting half the repositories (sweeps)",
                f"{unmark_s:.2f}",
                len(second.manifests),
                len(second.blobs),
                f"{unmark_s / list_s:.1f}x",
            ],
            [
                "gc again (nothing left to sweep)",
                f"{sweep_s:.2f}",
                len(third.manifests),
                len(third.blobs),
                f"{sweep_s / list_s:.1f}x",
            ],
        ],
    )


if __name__ == "__main__":
    main()
