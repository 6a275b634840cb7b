#!/usr/bin/env python3
"""Manifest GET requests per second and p50/p99 latency: forkd-hub vs docker-registry, same bytes, same load.

Usage: python bench/manifest_rps.py [--concurrency 1,8,32] [--seconds 5] [--repeat 3] [--hub-workers 2] [--dir DIR]

forkd-hub serves one of our layer manifests (a base pushed with ``forkd push --public``);
Debian's docker-registry (distribution 2.8) serves an OCI image manifest padded with an
annotation to exactly the same byte size (its config and layer blobs pushed with plain HTTP).
Both repositories are public/anonymous, so neither pays for auth; one more series sends a
bearer token (pull scope) to the hub to show what token checking costs. Both servers log one
line per request at their default level, to a file.

The load generator is ``wrk`` (Debian) with ``-c C`` connections on ``min(C, 2)`` threads, for
--seconds per run after a 1 s warm-up, each run a fresh wrk; without wrk, an asyncio httpx
generator sends a fixed number of requests. Everything shares the 2 cores: the generator takes
CPU from the server under test. The hub runs ``forkd-hub serve --workers N`` (default 2, one
per core; its read caches at their defaults); the registry is Go and uses both cores. Ratios are
hub / registry, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, MiB, median, print_table  # noqa: E402
from images import make_memory_image, make_vmstate  # noqa: E402
from procs import ForkdUser, HubServer, RegistryServer, log_summary  # noqa: E402

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def push_oci_manifest(registry: RegistryServer, name: str, tag: str, size: int) -> bytes:
    """Push a config + one small layer by monolithic upload, then a manifest of exactly ``size`` bytes."""
    descriptors = []
    for media_type, data in (
        ("application/vnd.oci.image.config.v1+json", b'{"architecture":"amd64","os":"linux"}'),
        ("application/vnd.oci.image.layer.v1.tar", b"layer bytes" * 100),
    ):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        r = httpx.post(
            f"{registry.url}/v2/{name}/blobs/uploads/",
            params={"digest": digest},
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        if r.status_code != 201:  # some registries want POST then PUT
            r = httpx.post(f"{registry.url}/v2/{name}/blobs/uploads/")
            location = httpx.URL(registry.url).join(r.headers["location"])
            r = httpx.put(location.copy_merge_params({"digest": digest}), content=data)
        r.raise_for_status()
        descriptors.append({"mediaType": media_type, "digest": digest, "size": len(data)})

    def manifest(pad: int) -> bytes:
        return json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": descriptors[0],
                "layers": descriptors[1:],
                "annotations": {"dev.forkd.bench.pad": "x" * pad},
            }
        ).encode()

    pad = size - len(manifest(0))
    if pad < 0:
        raise RuntimeError(f"cannot make an OCI manifest as small as {size} bytes")
    body = manifest(pad)
    assert len(body) == size
    r = httpx.put(f"{registry.url}/v2/{name}/manifests/{tag}", content=body, headers={"Content-Type": OCI_MANIFEST})
    r.raise_for_status()
    return body


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not m:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def run_wrk(url: str, concurrency: int, seconds: float, headers: dict[str, str]) -> dict[str, float]:
    cmd = [
        "wrk",
        "-t",
        str(min(concurrency, 2)),
        "-c",
        str(concurrency),
        "-d",
        f"{seconds:g}s",
        "--latency",
        "--timeout",
        "10s",
    ]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    done = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} {url} failed: {done.stderr.strip() or done.stdout.strip()}")
    out = done.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    if bad or errors:
        raise RuntimeError(f"wrk saw failures against {url}:\n{out}")
    return {"rps": rps, "p50": p50, "p99": p99}


def run_httpx(url: str, concurrency: int, requests: int, headers: dict[str, str]) -> dict[str, float]:
    """Fallback generator: ``requests`` GETs over ``concurrency`` keep-alive connections."""

    async def go() -> tuple[float, list[float]]:
        latencies: list[float] = []
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(limits=limits, headers=headers, timeout=10) as client:
            remaining = iter(range(requests))

            async def worker() -> None:
                for _ in remaining:
                    t = time.perf_counter()
                    r = await client.get(url)
                    if r.status_code != 200:
                        raise RuntimeError(f"GET {url}: {r.status_code}")
                    latencies.append((time.perf_counter() - t) * 1e3)

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - start, latencies

    elapsed, lat = asyncio.run(go())
    q = statistics.quantiles(lat, n=100)
    return {"rps": len(lat) / elapsed, "p50": q[49], "p99": q[98]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated client counts")
    ap.add_argument("--seconds", type=float, default=5, help="length of one wrk run")
    ap.add_argument("--requests", type=int, default=5000, help="requests per run for the httpx fallback")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hub-workers", type=int, default=2, help="forkd-hub serve --workers (default 2)")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    use_wrk = shutil.which("wrk") is not None

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="manifest-rps-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        src = root / "src"
        src.mkdir()
        make_memory_image(src / "memory.bin", 64 * MiB, 16 * MiB, seed=7)
        make_vmstate(src / "vmstate", seed=7)
        hub = stack.enter_context(
            HubServer(root / "hub", root / "hub.log", env={"FORKD_HUB_WORKERS": str(args.hub_workers)})
        )
        user = ForkdUser(root / "alice", hub.url, hub.token("alice", "push:acme/*"))
        user.run("import", str(src), "base")
        user.run("push", "base", "acme/mem:v1", "--public", "--json")
        reader = hub.token("reader", "pull:acme/*")
        hub_url = f"{hub.url}/v2/acme/mem/manifests/v1"
        ours = httpx.get(hub_url, headers={"Accept": OCI_MANIFEST})
        ours.raise_for_status()
        size = len(ours.content)

        registry = stack.enter_context(RegistryServer(root / "registry", root / "registry.log"))
        theirs = push_oci_manifest(registry, "bench/mem", "v1", size)
        reg_url = f"{registry.url}/v2/bench/mem/manifests/v1"
        check = httpx.get(reg_url, headers={"Accept": OCI_MANIFEST})
        assert check.status_code == 200 and check.content == theirs, check.status_code
        authed = httpx.get(hub_url, headers={"Accept": OCI_MANIFEST, "Authorization": f"Bearer {reader}"})
        assert authed.status_code == 200 and authed.content == ours.content, authed.status_code

        targets = {
            "hub": (hub_url, {"Accept": OCI_MANIFEST}),
            "registry": (reg_url, {"Accept": OCI_MANIFEST}),
            "hub+token": (hub_url, {"Accept": OCI_MANIFEST, "Authorization": f"Bearer {reader}"}),
        }
        results: dict[tuple[str, int], list[dict[str, float]]] = {}
        for c in levels:
            for name, (url, headers) in targets.items():
                runs = []
                if use_wrk:
                    run_wrk(url, c, 1, headers)  # warm-up
                else:
                    run_httpx(url, c, min(500, args.requests), headers)
                runs.extend(
                    run_wrk(url, c, args.seconds, headers) if use_wrk else run_httpx(url, c, args.requests, headers)
                    for _ in range(args.repeat)
                )
                results[(name, c)] = runs
        stack.close()  # stop the servers so their logs are complete
        logs = log_summary(hub=root / "hub.log", registry=root / "registry.log")

    def med(name: str, c: int, key: str) -> float:
        return median([r[key] for r in results[(name, c)]])

    gen = f"wrk, {args.seconds:g} s per run" if use_wrk else f"asyncio httpx, {args.requests} requests per run"
    print(
        f"manifest_rps: GET of a {size}-byte manifest (hub: forkd layer manifest, {args.hub_workers} worker(s); "
        f"registry: OCI manifest padded to the same size); {gen}; median of {args.repeat}; {MACHINE_NOTE}"
    )
    rows = []
    for c in levels:
        h, r, t = (med("hub", c, "rps"), med("registry", c, "rps"), med("hub+token", c, "rps"))
        rows.append(
            [
                c,
                f"{h:,.0f}",
                f"{r:,.0f}",
                f"{h / r:.2f}x",
                f"{t:,.0f}",
                f"{t / h:.2f}x",
                f"{med('hub', c, 'p50'):.2f}",
                f"{med('registry', c, 'p50'):.2f}",
                f"{med('hub', c, 'p99'):.2f}",
                f"{med('registry', c, 'p99'):.2f}",
                f"{med('hub', c, 'p99') / med('registry', c, 'p99'):.2f}x",
                f"{med('hub+token', c, 'p99'):.2f}",
            ]
        )
    print_table(
        [
            "clients",
            "hub rps",
            "registry rps",
            "hub/reg",
            "hub+token rps",
            "token/anon",
            "hub p50 ms",
            "reg p50 ms",
            "hub p99 ms",
            "reg p99 ms",
            "p99 hub/reg",
            "hub+token p99 ms",
        ],
        rows,
    )
    print(
        "runs (rps): "
        + "; ".join(f"{name}@{c}: " + "/".join(f"{x['rps']:.0f}" for x in runs) for (name, c), runs in results.items())
    )
    print(logs)


if __name__ == "__main__":
    main()
