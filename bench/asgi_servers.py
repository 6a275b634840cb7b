#!/usr/bin/env python3
"""The hub's manifest GET under uvicorn (``forkd-hub serve``) and granian, 1 and 2 worker processes.

Usage: python bench/asgi_servers.py [--concurrency 1,8,32] [--seconds 5] [--repeat 3] [--dir DIR]

One hub data dir holds a base pushed with ``forkd push --public`` (the manifest of
bench/manifest_rps.py); each server in turn serves it from that data dir, then wrk measures
anonymous GETs of it (a warm-up, then --repeat runs; medians). uvicorn is ``forkd-hub serve
--workers N``; granian is ``granian --interface asgi --factory --workers N
hub_server.app:create_app_from_environment`` (same app, same JSON access log to a file, but no
proxy-header handling). Ratios are against uvicorn with one worker, measured in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, ROOT, MiB, median, print_table  # noqa: E402
from images import make_memory_image, make_vmstate  # noqa: E402
from manifest_rps import OCI_MANIFEST, run_wrk  # noqa: E402
from procs import ForkdUser, HubServer, free_port, log_summary, stop_process, wait_http  # noqa: E402


@contextlib.contextmanager
def granian(data_dir: Path, log_path: Path, workers: int):
    exe = shutil.which("granian")
    if exe is None:
        raise SystemExit("granian is not installed: pip install granian")
    port = free_port()
    env = {**os.environ, "FORKD_HUB_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [
                exe,
                "--interface",
                "asgi",
                "--factory",
                "--workers",
                str(workers),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-ws",
                "--log-level",
                "warning",
                "hub_server.app:create_app_from_environment",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(url + "/healthz", proc, "granian")
            yield url
        finally:
            stop_process(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    headers = {"Accept": OCI_MANIFEST}
    results: dict[tuple[str, int, int], list[dict[str, float]]] = {}

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="asgi-servers-") as tmp:
        root = Path(tmp)
        src = root / "src"
        src.mkdir()
        make_memory_image(src / "memory.bin", 64 * MiB, 16 * MiB, seed=7)
        make_vmstate(src / "vmstate", seed=7)
        data = root / "hub"
        with HubServer(data, root / "setup.log") as hub:
            user = ForkdUser(root / "alice", hub.url, hub.token("alice", "push:acme/*"))
            user.run("import", str(src), "base")
            user.run("push", "base", "acme/mem:v1", "--public", "--json")
        path = "/v2/acme/mem/manifests/v1"

        def measure(name: str, workers: int, url: str) -> None:
            for c in levels:
                run_wrk(url + path, c, 1, headers)
                results[(name, workers, c)] = [
                    run_wrk(url + path, c, args.seconds, headers) for _ in range(args.repeat)
                ]

        for workers in (1, 2):
            with HubServer(data, root / "uvicorn.log", env={"FORKD_HUB_WORKERS": str(workers)}) as hub:
                measure("uvicorn", workers, hub.url)
            with granian(data, root / "granian.log", workers) as url:
                measure("granian", workers, url)
        logs = log_summary(uvicorn=root / "uvicorn.log", granian=root / "granian.log")

    print(
        f"asgi_servers: anonymous GET of the hub's 882-byte manifest; wrk, {args.seconds:g} s per run; median of "
        f"{args.repeat}; {MACHINE_NOTE}"
    )
    rows = []
    for c in levels:
        base = median([r["rps"] for r in results[("uvicorn", 1, c)]])
        for (name, workers, level), runs in results.items():
            if level != c:
                continue
            rps = median([r["rps"] for r in runs])
            rows.append(
                [
                    c,
                    name,
                    workers,
                    f"{rps:,.0f}",
                    f"{rps / base:.2f}x",
                    f"{median([r['p50'] for r in runs]):.2f}",
                    f"{median([r['p99'] for r in runs]):.2f}",
                ]
            )
    print_table(["clients", "server", "workers", "rps", "vs uvicorn x1", "p50 ms", "p99 ms"], rows)
    print(logs)


if __name__ == "__main__":
    main()
