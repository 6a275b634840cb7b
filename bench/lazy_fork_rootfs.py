"""Lazy fork of a real environment (a Debian userland with python3 on its root filesystem):
the disk served lazily vs fetched whole first vs pull-then-fork.

    python bench/lazy_fork_rootfs.py [--mem-mib 512] [--mbit 1000 [--mbit 200 …]] [--repeat 1] [--exec CMD] [--dir DIR]

Bakes one real QEMU (TCG) base with ``forkd from-debian --include python3,python3-pip`` (the
userland comes from the rootfs cache when an earlier run built it), pushes it to a real
``forkd-hub serve``, then, from a fresh store each time, runs ``--exec`` (default: a python3 that
imports a few stdlib modules and prints) in one child by three paths:

* **pull-then-fork**: ``pull`` (every chunk fetched and verified, the chain installed), then
  ``vmops.fork``;
* **lazy, disk lazy** (the default of ``forkd fork --lazy``): memory and ``rootfs.ext4`` both
  served through the FUSE mount, each chunk fetched and verified when the child first reads it;
* **lazy, disk whole first** (``FORKD_LAZY_ROOTFS_WHOLE=1``): memory lazy, the disk fetched whole
  (verified) before the child is restored;
* the two lazy paths again, **with a profile from the push**: the same head pushed to another
  repository with an access profile recorded at push (``forkd push --record-profile
  --profile-exec CMD``: one local child runs the same command through a recording mount), so
  each is that repository's first lazy fork but knows which memory and disk chunks the child
  reads first, and fetches them before it restores the child.

Time is from the call to the child's answer; "installed" is from the call until the chain is
installed (lazy: the background fill after the answer, then the install, as ``forkd fork
--lazy`` does). Bytes are what the hub client received before the answer. Over loopback, then
over a veth pair to the hub in a network namespace of its own, shaped to each ``--mbit`` Mbit/s
each way in turn (bench/netshape.py ``server_netns``; needs root and iproute2, else that part is
skipped).
With ``--repeat N`` each path runs N times per network and the medians are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import human, median, print_table  # noqa: E402
from netshape import ServerNetns, server_netns  # noqa: E402
from procs import HubServer, forkd_cmd  # noqa: E402

from forkd_client.hub.client import HubClient  # noqa: E402
from forkd_client.hub.pull import pull  # noqa: E402
from forkd_client.hub.push import push  # noqa: E402
from forkd_client.hub.reference import Reference  # noqa: E402
from forkd_client.lazy.fork import lazy_fork  # noqa: E402
from forkd_client.lazy.profile import FileProfile, attach_profile  # noqa: E402
from forkd_client.lazy.record import record_profile  # noqa: E402
from forkd_client.store import SnapshotStore  # noqa: E402
from forkd_client.vmops import fork  # noqa: E402
from manifest.chunking import DEFAULT_CHUNK_SIZE  # noqa: E402

REF = Reference.parse("bench/py:v1")
PROFILED = Reference.parse("bench/py-profiled:v1")  # the same head, with a profile recorded at push
DEFAULT_EXEC = "python3 -c 'import json, email.parser, http.client, decimal; print(json.dumps(7))'"
PATHS = (
    "pull-then-fork",
    "lazy, disk lazy",
    "lazy, disk whole first",
    "lazy, disk lazy, profile from the push",
    "lazy, disk whole first, profile from the push",
)


@contextlib.contextmanager
def rootfs_whole(on: bool) -> Iterator[None]:
    """FORKD_LAZY_ROOTFS_WHOLE set to 1 (or unset) for the sessions made meanwhile."""
    before = os.environ.pop("FORKD_LAZY_ROOTFS_WHOLE", None)
    if on:
        os.environ["FORKD_LAZY_ROOTFS_WHOLE"] = "1"
    try:
        yield
    finally:
        os.environ.pop("FORKD_LAZY_ROOTFS_WHOLE", None)
        if before is not None:
            os.environ["FORKD_LAZY_ROOTFS_WHOLE"] = before


def pull_then_fork(root: Path, url: str, token: str, command: str) -> dict[str, Any]:
    with SnapshotStore(root) as store, HubClient(url, token) as client:
        started = time.perf_counter()
        pull(store, client, REF, as_tag="py")
        installed = time.perf_counter() - started
        with fork(store, "py", 1) as forked:
            forked.run(command, 600)
            answered = time.perf_counter() - started
            child = forked.children[0]
            answer = child.result.output.strip() if child.result else f"error: {child.error}"
        return {"answer": answer, "s": answered, "installed_s": installed, "bytes": client.bytes_received}


def lazy(root: Path, url: str, token: str, command: str, *, whole: bool, ref: Reference) -> dict[str, Any]:
    with SnapshotStore(root) as store, HubClient(url, token) as client, rootfs_whole(whole):
        started = time.perf_counter()
        done = lazy_fork(store, client, ref, 1, as_tag="py")
        with done.session:
            try:
                done.forked.run(command, 600)
                answered = time.perf_counter() - started
                received = client.bytes_received
                child = done.forked.children[0]
                answer = child.result.output.strip() if child.result else f"error: {child.error}"
            finally:
                done.forked.kill()
            done.finish()  # the rest filled (the child's reads first), then installed
            installed = time.perf_counter() - started
        disk = done.rootfs_stats or {}
        return {
            "answer": answer,
            "s": answered,
            "installed_s": installed,
            "bytes": received,
            "memory_chunks": f"{done.stats['chunks_fetched']}/{done.stats['chunks']}",
            "disk_chunks": f"{disk.get('chunks_fetched', 0)}/{disk.get('chunks', 0)}",
        }


def one_network(label: str, root: Path, url: str, token: str, command: str, repeat: int) -> list[list[object]]:
    results: dict[str, list[dict[str, Any]]] = {path: [] for path in PATHS}
    for k in range(repeat):  # the paths alternate, so a load change hits each of them alike
        for path in PATHS:
            where = root / f"{label}-{k}-{PATHS.index(path)}".replace(" ", "_").replace("/", "_")
            if path == "pull-then-fork":
                result = pull_then_fork(where, url, token, command)
            else:
                whole, ref = "whole first" in path, PROFILED if path.endswith("profile from the push") else REF
                result = lazy(where, url, token, command, whole=whole, ref=ref)
            print(f"[{label}] {path}: {json.dumps(result)}", flush=True)
            results[path].append(result)
            shutil.rmtree(where, ignore_errors=True)
    full_s = median([float(r["s"]) for r in results["pull-then-fork"]])
    rows: list[list[object]] = []
    for path, runs in results.items():
        s = median([float(r["s"]) for r in runs])
        installed = median([float(r["installed_s"]) for r in runs])
        received = median([float(r["bytes"]) for r in runs])
        rows.append(
            [
                label,
                path,
                f"{s:.2f} s",
                f"{100 * s / full_s:.0f}%",
                human(int(received)),
                str(runs[-1].get("memory_chunks", "all")),
                str(runs[-1].get("disk_chunks", "all")),
                f"{installed:.2f} s",
            ]
        )
    return rows


def push_both(store: SnapshotStore, client: HubClient, profile: list[FileProfile]) -> None:
    """The head as REF, and as PROFILED with ``profile`` attached (what ``push --record-profile`` does)."""
    push(store, client, "py", REF)
    head = push(store, client, "py", PROFILED).digest
    repo = client.repository(PROFILED.name)
    manifest, _ = repo.get_manifest(head)
    memory, more = profile[0], profile[1:]
    attach_profile(repo, head, len(manifest), memory.chunk_size, memory.chunks, more=more)


def bake(src: Path, mem_mib: int) -> dict[str, Any]:
    """``forkd from-debian`` into ``src`` (the userland from the rootfs cache after a first build)."""
    args = ["from-debian", "--include", "python3,python3-pip", "--tag", "py", "--mem-mib", str(mem_mib)]
    done = subprocess.run(
        forkd_cmd(*args, "--home", str(src), "--json", "--quiet"), capture_output=True, text=True, timeout=3600
    )
    if done.returncode != 0:
        raise SystemExit(f"forkd from-debian failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mem-mib", type=int, default=512, help="guest RAM (default 512)")
    parser.add_argument(
        "--mbit", type=int, action="append", help="a shaped link's rate, repeatable (default 1000 Mbit/s)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each path per network (medians printed)")
    parser.add_argument("--exec", dest="command", default=DEFAULT_EXEC, help="what the child runs")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    args.mbit = args.mbit or [1000]
    root = Path(tempfile.mkdtemp(prefix="lazy-rootfs-bench-", dir=args.dir))
    try:
        started = time.perf_counter()
        baked = bake(root / "src", args.mem_mib)
        rootfs = baked.get("rootfs") or {}
        print(
            f"baked {args.mem_mib} MiB guest on {rootfs.get('source', '?')} "
            f"({human(int(rootfs.get('size', 0)))} rootfs, cache hit: {rootfs.get('cache_hit')}) "
            f"in {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        rows: list[list[object]] = []
        with SnapshotStore(root / "src") as store:
            recorded = time.perf_counter()
            profile = record_profile(store, "py", DEFAULT_CHUNK_SIZE, exec_cmd=args.command)
            print(
                f"profile recorded in {time.perf_counter() - recorded:.1f} s: "
                + ", ".join(f"{len(p.chunks)} chunks of {p.file}" for p in profile)
            )
            with HubServer(root / "hub", root / "hub.log") as hub:
                token = hub.token("bench", "push:bench/*")
                with HubClient(hub.url, token) as client:
                    pushed = time.perf_counter()
                    push_both(store, client, profile)
                    print(f"pushed in {time.perf_counter() - pushed:.1f} s ({human(client.bytes_sent)} sent)")
                rows += one_network("loopback", root, hub.url, token, args.command, args.repeat)
            with server_netns() as bed:
                if isinstance(bed, str):
                    print(f"shaped run skipped: {bed}")
                else:
                    rows += shaped_network(bed, root, store, profile, args)
        print_table(
            [
                "network",
                "path",
                "first answer",
                "vs pull",
                "bytes before it",
                "memory chunks",
                "disk chunks",
                "installed",
            ],
            rows,
            title=f"time to the first child's answer ({args.command}), bytes received before it, chunks fetched "
            "before it, and time until the chain is installed",
        )
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def shaped_network(
    bed: ServerNetns, root: Path, store: SnapshotStore, profile: list[FileProfile], args: argparse.Namespace
) -> list[list[object]]:
    """The same paths against a hub in the namespace, behind the veth pair shaped to each rate in turn."""
    rows: list[list[object]] = []
    with HubServer(root / "hub-ns", root / "hub-ns.log", host=bed.server_ip, launcher=bed.launcher) as hub:
        token = hub.token("bench", "push:bench/*")
        with HubClient(hub.url, token) as client:
            push_both(store, client, profile)
        for mbit in args.mbit:
            with bed.shaped(mbit) as why:
                if why is not None:
                    print(f"shaped run skipped: {why}")
                    continue
                rows += one_network(f"{mbit} Mbit/s", root, hub.url, token, args.command, args.repeat)
    return rows


if __name__ == "__main__":
    main()
