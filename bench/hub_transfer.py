#!/usr/bin/env python3
"""Chunk upload/download throughput through the hub on loopback, against raw limits measured in the same run.

Usage: python bench/hub_transfer.py [--image-mib 1024] [--data-mib 512] [--repeat 3] [--dir DIR]

The base snapshot's memory.bin is --image-mib apparent with --data-mib of data in random 4 MiB
blocks (alternately random and text-like bytes, zstd ratio ~1.8), the rest holes. The raw peers
move exactly those data bytes (the holes removed):

* loopback HTTP: curl (C) against a trivial stdlib ``http.server`` process (ThreadingHTTPServer,
  HTTP/1.1): PUT reads the body in 1 MiB pieces and discards it; GET streams a file from the page
  cache with shutil.copyfileobj. One request of the whole size.
* disk: write the bytes in 4 MiB writes + fsync to a new file; read them back in 4 MiB reads
  after evicting that file from the page cache (posix_fadvise DONTNEED).
* compute, in process on every core: zstd level 3 + blake3 per 64 KiB chunk + sha256 of the
  frames (what a push cannot avoid), and inflating + blake3 of those frames (a pull).

The limit of each direction is the slowest of its three (push: PUT, disk write, compress+hash;
pull: GET, disk write, decompress+hash); "vs limit" is forkd against it (issue 15: >= 0.5x).

Then ``forkd push`` of the base into a fresh hub (new data dir each run, so nothing dedups
against an earlier run; once as it comes, frames sent after the layer is built, and once with
``FORKD_PUSH_STREAM=1``, frames sent while it builds) and ``forkd pull`` of it into an
empty store, both as real CLI
processes (their start-up included). MiB/s are of data bytes; ratios are hub / raw. Wire bytes
come from one extra, untimed push and pull through a byte-counting TCP proxy. The CPU seconds of
each timed push (the ``forkd`` process and the hub's) are printed beside the CPU seconds of the
limit's compress row: on one machine both sides share the cores, so their sum over the cores
bounds the push's wall time from below whatever the overlap.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, MiB, fmt_runs, human, median, mib_s, print_table, timed_runs  # noqa: E402
from images import allocated, drop_file_cache, make_memory_image, make_vmstate  # noqa: E402
from oci import sha256_file  # noqa: E402
from procs import ForkdUser, HubServer, free_port, log_summary, stop_process, wait_http  # noqa: E402
from proxy import CountingProxy  # noqa: E402

TRIVIAL_SERVER = textwrap.dedent("""
    import os, shutil, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    PATH = sys.argv[2]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_PUT(self):
            remaining = int(self.headers["Content-Length"])
            while remaining:
                piece = self.rfile.read(min(remaining, 1 << 20))
                if not piece:
                    break
                remaining -= len(piece)
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(os.path.getsize(PATH)))
            self.end_headers()
            with open(PATH, "rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 20)

    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
""")


def curl(*args: str) -> None:
    subprocess.run(["curl", "-sS", "--fail", *args], check=True, stdout=subprocess.DEVNULL, timeout=300)


def extract_data(image: Path, out: Path) -> bytes:
    """The non-hole bytes of ``image`` (what the raw peers move), also written to ``out``."""
    pieces = []
    with open(image, "rb") as f:
        fd, pos, size = f.fileno(), 0, image.stat().st_size
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            f.seek(start)
            pieces.append(f.read(end - start))
            pos = end
    data = b"".join(pieces)
    out.write_bytes(data)
    return data


def disk_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        view = memoryview(data)
        for o in range(0, len(data), 4 * MiB):
            f.write(view[o : o + 4 * MiB])
        f.flush()
        os.fsync(f.fileno())


def disk_read(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(4 * MiB):
            pass


def compress_and_hash(data: bytes, threads: int) -> None:
    """What a push must do to the data at least: per 64 KiB chunk blake3 + a zstd level-3 frame
    (as manifest.layer builds them), then sha256 over the frames (the data blob's digest); chunks
    spread over ``threads`` threads (zstd and hashlib release the GIL)."""
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    import blake3
    import zstandard

    view = memoryview(data)
    chunk = 64 * 1024
    step = -(-len(data) // threads // chunk) * chunk

    def part(start: int) -> list[bytes]:
        compressor = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=False)
        out = []
        for off in range(start, min(start + step, len(data)), chunk):
            piece = view[off : off + chunk]
            blake3.blake3(piece).digest()
            out.append(compressor.compress(piece))
        return out

    with ThreadPoolExecutor(threads) as pool:
        frames = [f for part_frames in pool.map(part, range(0, len(data), step)) for f in part_frames]
    blob = hashlib.sha256()
    for frame in frames:
        blob.update(frame)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds a running process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (each ``forkd`` run)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_cpu(fn: Callable[[], object]) -> float:
    """CPU seconds (user + system, every thread) of this process while ``fn`` runs."""
    before = time.process_time()
    fn()
    return time.process_time() - before


def decompress_and_hash(frames: list[bytes], threads: int) -> None:
    """What a pull must do at least: inflate each frame and blake3 the chunk, on ``threads`` threads."""
    from concurrent.futures import ThreadPoolExecutor

    import blake3
    import zstandard

    def part(group: list[bytes]) -> None:
        decompressor = zstandard.ZstdDecompressor()
        for frame in group:
            blake3.blake3(decompressor.decompress(frame)).digest()

    size = -(-len(frames) // threads)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(part, [frames[i : i + size] for i in range(0, len(frames), size)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image-mib", type=int, default=1024, help="apparent size of memory.bin")
    ap.add_argument("--data-mib", type=int, default=512, help="data in it (the rest are holes)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="hub-transfer-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        src = root / "src"
        src.mkdir()
        info = make_memory_image(src / "memory.bin", args.image_mib * MiB, args.data_mib * MiB, seed=1)
        make_vmstate(src / "vmstate", seed=1)
        data = extract_data(src / "memory.bin", root / "data.bin")
        nbytes = len(data)

        # (i) raw loopback HTTP
        port = free_port()
        server = subprocess.Popen([sys.executable, "-c", TRIVIAL_SERVER, str(port), str(root / "data.bin")])
        stack.callback(stop_process, server)
        url = f"http://127.0.0.1:{port}/blob"
        wait_http(url, server, "trivial http.server")
        curl("-o", "/dev/null", url)  # warm the page cache and the server
        raw_put = timed_runs(lambda i: curl("-T", str(root / "data.bin"), "-H", "Expect:", url), args.repeat)
        raw_get = timed_runs(lambda i: curl("-o", "/dev/null", url), args.repeat)
        stop_process(server)

        # (ii) raw disk
        target = root / "disk.bin"
        disk_w = timed_runs(
            lambda i: disk_write(target, data), args.repeat, before=lambda i: target.unlink(missing_ok=True)
        )
        disk_r = timed_runs(lambda i: disk_read(target), args.repeat, before=lambda i: drop_file_cache(target))
        target.unlink()

        # (iii) compress + hash (push) and decompress + hash (pull), in process, on every core
        cores = os.cpu_count() or 1
        comp = timed_runs(lambda i: compress_and_hash(data, cores), args.repeat)
        comp_cpu = timed_cpu(lambda: compress_and_hash(data, cores))  # untimed: what the limit row costs in CPU
        zc = __import__("zstandard").ZstdCompressor(level=3, write_content_size=True, write_checksum=False)
        frames = [zc.compress(data[o : o + 65536]) for o in range(0, nbytes, 65536)]
        decomp = timed_runs(lambda i: decompress_and_hash(frames, cores), args.repeat)
        frames = []
        data = b""  # free the buffer before the hub runs

        # forkd push into a fresh hub each run; pull from the last one into empty stores
        live: dict[str, object] = {}

        def fresh_hub(i: int) -> None:
            """A new hub (empty data dir) and a new pushing user with the base imported; untimed."""
            if "hub" in live:
                live["hub"].stop()  # type: ignore[union-attr]
            hub = HubServer(root / f"hub{i}", root / "hub.log")
            stack.callback(hub.stop)
            live["hub"] = hub
            live["user"] = ForkdUser(root / f"alice{i}", hub.url, hub.token("alice", "push:acme/*"))
            live["user"].run("import", str(src), "base")  # type: ignore[union-attr]

        push_results: list[dict] = []
        push_cpu: list[tuple[float, float]] = []  # (forkd push, the hub) CPU seconds of each timed push

        def counted_push(i: int) -> None:
            hub_before, mine_before = process_cpu(live["hub"].proc.pid), children_cpu()  # type: ignore[union-attr]
            push_results.append(live["user"].json("push", "base", "acme/mem:v1", "--public"))  # type: ignore[union-attr]
            hub_after = process_cpu(live["hub"].proc.pid)  # type: ignore[union-attr]
            push_cpu.append((children_cpu() - mine_before, hub_after - hub_before))

        push_t = timed_runs(counted_push, args.repeat, before=fresh_hub)
        hub: HubServer = live["hub"]  # type: ignore[assignment]
        stored = allocated(hub.data_dir / "blobs")
        pullers = [ForkdUser(root / f"bob{i}", hub.url) for i in range(args.repeat)]
        pull_results: list[dict] = []
        pull_t = timed_runs(
            lambda i: pull_results.append(pullers[i].json("pull", "acme/mem:v1", "--as", "mem")), args.repeat
        )
        pulled = pullers[0].home / "snapshots" / "mem" / "memory.bin"
        identical = sha256_file(pulled) == sha256_file(src / "memory.bin")
        # the same push uploading frames while the layer is built (FORKD_PUSH_STREAM=1, opt-in)
        while_building = {"FORKD_PUSH_STREAM": "1"}
        streamed_t = timed_runs(
            lambda i: live["user"].json("push", "base", "acme/mem:v1", "--public", env=while_building),
            args.repeat,
            before=lambda i: fresh_hub(100 + i),
        )

        # wire bytes: one untimed push and pull through a counting proxy in front of a fresh hub
        fresh_hub(args.repeat)
        hub = live["hub"]  # type: ignore[assignment]
        proxy = stack.enter_context(CountingProxy(hub.port))
        counted = ForkdUser(root / "carol", proxy.url, hub.token("carol", "push:acme/*"))
        counted.run("import", str(src), "base")
        proxy.reset()
        push_rep = counted.json("push", "base", "acme/mem:v1", "--public")
        push_up, push_down = proxy.reset()
        pull_rep = ForkdUser(root / "dave", proxy.url).json("pull", "acme/mem:v1", "--as", "mem")
        pull_up, pull_down = proxy.reset()
        stack.close()  # stop the servers so their logs are complete
        logs = log_summary(hub=root / "hub.log")

    rows = []
    peers = {"put": median(raw_put), "get": median(raw_get), "dw": median(disk_w), "dr": median(disk_r)}
    # the machine's limit for each direction: the slowest of the steps it cannot avoid
    peers["push"] = max(peers["put"], peers["dw"], median(comp))
    peers["pull"] = max(peers["get"], peers["dw"], median(decomp))

    def row(
        name: str, times: list[float], vs_http: str | None, vs_disk: str | None, vs_limit: str | None = None
    ) -> list[str]:
        rate = mib_s(nbytes, median(times))
        ratio = lambda key: f"{mib_s(nbytes, median(times)) / mib_s(nbytes, peers[key]):.2f}x" if key else ""  # noqa: E731
        return [
            name,
            fmt_runs(times),
            f"{median(times):.3f}",
            f"{rate:.0f}",
            ratio(vs_http),
            ratio(vs_disk),
            ratio(vs_limit),
        ]

    rows.append(row("raw loopback PUT (curl -> http.server, discard)", raw_put, None, None))
    rows.append(row("raw loopback GET (http.server -> curl)", raw_get, None, None))
    rows.append(row("raw disk write + fsync (4 MiB writes)", disk_w, None, None))
    rows.append(row("raw disk read, file evicted from cache", disk_r, None, None))
    rows.append(row(f"zstd-3 + blake3 + sha256 ({cores} threads)", comp, None, None))
    rows.append(row(f"unzstd + blake3 ({cores} threads)", decomp, None, None))
    rows.append(row("forkd push base (CLI, fresh hub)", push_t, "put", "dw", "push"))
    rows.append(row("  same, frames sent while building", streamed_t, "put", "dw", "push"))
    rows.append(row("forkd pull into an empty store (CLI)", pull_t, "get", "dr", "pull"))

    print(
        f"hub_transfer: memory.bin {human(info.size)} apparent, {human(nbytes)} data "
        f"(half random, half text-like, rest holes); median of {args.repeat}; {MACHINE_NOTE}"
    )
    print_table(["operation", "runs (s)", "median s", "MiB/s data", "vs loopback", "vs disk", "vs limit"], rows)
    print(
        "limit: the slowest of loopback, disk write and (de)compress + hash, each measured above "
        "(push: PUT, write, zstd; pull: GET, write, unzstd)"
    )

    client_cpu = median([c for c, _ in push_cpu])
    hub_cpu = median([h for _, h in push_cpu])
    print(
        f"push CPU seconds (median of the timed pushes): forkd push {client_cpu:.2f} + hub {hub_cpu:.2f} = "
        f"{client_cpu + hub_cpu:.2f}, on {cores} cores at best {(client_cpu + hub_cpu) / cores:.2f} s of wall time; "
        f"the limit's zstd-3 + blake3 + sha256 row: {comp_cpu:.2f} CPU s"
    )

    logical = info.size

    def brow(name: str, n: int) -> list[str]:
        return [name, f"{n:,}", f"{n / nbytes:.3f}", f"{n / logical:.3f}"]

    print_table(
        ["bytes", "bytes", "/ data", "/ logical"],
        [
            brow("push: client -> hub on the wire (proxy)", push_up),
            brow("push: hub -> client on the wire (proxy)", push_down),
            brow("push: forkd --json bytes_sent", push_rep["bytes_sent"]),
            brow("pull: hub -> client on the wire (proxy)", pull_down),
            brow("pull: client -> hub on the wire (proxy)", pull_up),
            brow("pull: forkd --json bytes_received", pull_rep["bytes_received"]),
            brow("hub blob store on disk after push (st_blocks)", stored),
            brow("data bytes (non-hole)", nbytes),
            brow("logical size (memory.bin apparent)", logical),
        ],
        title="bytes (wire: one extra push + pull through a counting TCP proxy, HTTP headers included)",
    )
    print(
        f"pulled memory.bin identical to the source: {identical}; "
        f"push links: {[(ln['new_chunks'], ln['reused_chunks']) for ln in push_results[-1]['links']]} (new, reused chunks); "
        f"pull chunks fetched: {sum(ln['chunks_fetched'] for ln in pull_results[-1]['links'])}"
    )
    print(logs)


if __name__ == "__main__":
    main()
