"""Real environments (issue 25): what a second environment from the same image sends, and what a real
userland costs a fork.

    python bench/real_env.py [--rounds 3] [--skip-push] [--skip-fork]

**Push of a second environment.** One OCI image (Debian bookworm's python3 + pip, as a one-layer ``oci:``
layout of an mmdebstrap tarball), two environments baked from it with ``forkd from-image`` and different
``--exec`` steps (A: a marker file; B: ``compileall`` over the standard library plus a 4 MiB file, so both
its disk and its memory change), pushed to one hub into two repositories: A first, then B. B's **changed
bytes** are measured locally: the bytes of B's 64 KiB chunks (memory.bin, rootfs.ext4) that are not zero
and whose content is in none of A's chunks, plus its vmstate. Printed: B's bytes sent by ``forkd push
--json`` against those changed bytes (goal ≤ 1.2×), and against the same chunks compressed with zstd -3
(the physical limit of sending them).

**Fork cost.** ``forkd fork -n 5`` of a Debian python+numpy snapshot (512 MiB guest, numpy imported before
the snapshot) against the busybox test guest's (256 MiB), alternating, ``--rounds`` times each; printed:
the median spawn time (first process to every child restored, reseeded and clock-set) and their ratio
(goal < 1.5×).

Both need root (the root filesystem keeps file owners) and QEMU; the Debian userlands are cached in
``$FORKD_ROOTFS_CACHE`` (default ``~/.cache/forkd/rootfs``) after the first run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import human, print_table  # noqa: E402
from procs import ForkdUser, HubServer  # noqa: E402

from forkd_client.images import DebianSpec, build_rootfs  # noqa: E402
from forkd_client.images.cache import RootfsCache, cache_root  # noqa: E402
from forkd_client.images.debian import debian_inputs  # noqa: E402
from manifest.chunking import DEFAULT_CHUNK_SIZE, iter_nonzero_chunks  # noqa: E402
from tests.forkd_client.images.ocibuild import layout_from_rootfs_tar  # noqa: E402  (the test helper that writes layouts)

PYTHON = DebianSpec("bookworm", ("python3", "python3-pip"))
NUMPY = DebianSpec("bookworm", ("python3", "python3-numpy"))
CHUNKED = ("memory.bin", "rootfs.ext4")


def chunk_contents(snapshot_dir: Path) -> dict[bytes, bytes]:
    """Every non-zero 64 KiB chunk of the snapshot's chunked files, by its blake3 digest."""
    import blake3

    chunks: dict[bytes, bytes] = {}
    for name in CHUNKED:
        path = snapshot_dir / name
        if path.is_file():
            for _, data in iter_nonzero_chunks(path, DEFAULT_CHUNK_SIZE):
                chunks.setdefault(blake3.blake3(data).digest(), data)
    return chunks


def bench_push(work: Path) -> list[list[object]]:
    cache = cache_root()
    build_rootfs(PYTHON, cache_dir=cache)  # the userland, once (cached)
    tarball = RootfsCache(cache).debian_tarball(debian_inputs(PYTHON).key)
    layout = work / "layout"
    layout.mkdir()
    layout_from_rootfs_tar(tarball, layout, tag="py")
    image = f"oci:{layout}:py"
    with HubServer(work / "hub", work / "hub.log") as hub:
        user = ForkdUser(work / "user", hub.url, hub.token("bench", "push:bench/*"))
        user.run("from-image", image, "--tag", "env-a", "--exec", "echo a > /root/a", "-q")
        user.run(
            "from-image", image, "--tag", "env-b", "-q", "--exec",
            "python3 -m compileall -q /usr/lib/python3.11 > /dev/null; head -c 4194304 /dev/urandom > /root/b",
        )  # fmt: skip
        pushed_a = user.json("push", "env-a", "bench/env-a:v1")
        pushed_b = user.json("push", "env-b", "bench/env-b:v1")
        snapshots = user.home / "snapshots"
        known = chunk_contents(snapshots / "env-a")
        new = {d: c for d, c in chunk_contents(snapshots / "env-b").items() if d not in known}
        vmstate = (snapshots / "env-b" / "vmstate").stat().st_size
        changed = sum(len(c) for c in new.values()) + vmstate
        compressor = zstandard.ZstdCompressor(level=3)
        limit = sum(len(compressor.compress(c)) for c in new.values()) + vmstate
    sent_b = pushed_b["bytes_sent"]
    return [
        ["env A pushed first (whole)", human(pushed_a["bytes_sent"]), "", ""],
        ["env B: changed bytes (new chunks + vmstate)", human(changed), f"{len(new)} chunks", ""],
        ["env B: changed bytes, zstd -3 (the limit)", human(limit), "", ""],
        [
            "env B: bytes sent by forkd push",
            human(sent_b),
            f"{sent_b / changed:.3f}x changed",
            f"{sent_b / limit:.2f}x limit",
        ],
    ]


def bench_fork(work: Path, rounds: int) -> list[list[object]]:
    build_rootfs(NUMPY, cache_dir=cache_root())
    user = ForkdUser(work / "fork-user", "http://127.0.0.1:9")  # no hub: local only
    user.run("snapshot", "--tag", "busybox", "--mem-mib", "256")
    user.run(
        "from-debian", "--include", ",".join(NUMPY.packages), "--tag", "numpy", "-q",
        "--exec", "python3 -c 'import numpy'",
    )  # fmt: skip
    times: dict[str, list[float]] = {"busybox": [], "numpy": []}
    for _ in range(rounds):
        for tag in times:
            forked = user.json("fork", tag, "-n", "5")
            times[tag].append(forked["spawn_ms"] / 1000)
    busybox, numpy = statistics.median(times["busybox"]), statistics.median(times["numpy"])
    return [
        ["fork -n 5, busybox test guest (256 MiB)", f"{busybox:.2f} s", " ".join(f"{t:.2f}" for t in times["busybox"]), ""],
        ["fork -n 5, Debian python+numpy (512 MiB)", f"{numpy:.2f} s", " ".join(f"{t:.2f}" for t in times["numpy"]), f"{numpy / busybox:.2f}x busybox"],
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="fork rounds per snapshot (default 3)")
    ap.add_argument("--skip-push", action="store_true")
    ap.add_argument("--skip-fork", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forkd-bench-real-env-"))
    rows: list[list[object]] = []
    try:
        if not args.skip_push:
            rows += bench_push(work)
        if not args.skip_fork:
            rows += bench_fork(work, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(["what", "value", "detail", "ratio"], rows, title="Real environments (issue 25)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
