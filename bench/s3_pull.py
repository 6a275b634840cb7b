#!/usr/bin/env python3
"""The 3-link chain on S3 (a real SeaweedFS): pull with presigned redirects vs proxied through the
hub vs raw boto3 GETs of the same objects; push vs raw boto3 multipart uploads of the same objects.

Usage: python bench/s3_pull.py [--mem-mib 512] [--data-fraction 0.5] [--dirty 0.03] [--dir DIR]
                               [--client-fs {both,ext4,xfs}] [--link-mbit 1000] [--bed {netns,lo}]

The chain is the one of chain_pull_vs_skopeo.py: a base memory.bin of --mem-mib, half data
(random 4 MiB blocks, alternately random and text-like), two links each rewriting --dirty of the
image. One SeaweedFS (``weed server -s3``) holds the blobs; two ``forkd-hub serve`` processes
share one SQLite database and the same bucket prefix: one answers blob GETs with 307 to a
presigned URL and data-blob range GETs with a fetch plan of presigned pack ranges (the default), the other has FORKD_HUB_BLOB_REDIRECTS=false and streams the bytes
itself. One run of each (the issue asks for one; the machine is shared and noisy):

pull   ``forkd pull`` of the chain into an empty store through each hub, vs boto3 GETs of every
       object under the prefix (what a cold pull needs: the frame packs holding the data blobs'
       frames, chunk maps, configs, vmstates, manifests), written to files, 4 objects at a time (forkd pulls with 4 requests
       in flight); each object is one GET, big ones boto3's managed download (8 MiB ranged GETs).
push   ``forkd push`` of the chain through the hub into an empty prefix, vs boto3's managed
       multipart upload (16 MiB parts, 4 threads) of the same objects from local files.
local  the same push and pull against a third hub on its default filesystem store: the client's
       own work (diffing, compressing, verifying, assembling) without S3.
fair   a second, clearly labelled peer row per client filesystem: the same raw boto3 GETs, then
       the three assembled memory images written (their data, holes kept, 8 MiB pwrites, one
       thread per image) and fsynced, which a pull must do and raw GETs do not. The issue's own
       peer (raw GETs alone) and its goal line are unchanged; the fair peer gets its own ratio line.

Client filesystem (--client-fs): the pulling client's store (FORKD_HOME) and raw boto3's
destination files live on the work directory's own filesystem ("ext4": ext4 on the bench machine,
no reflink, so each link's parent image is copied before its changed chunks are written), on a
loop-mounted XFS made with ``mkfs.xfs -m reflink=1`` ("xfs": links are reflink clones), or both,
one set of pull rows each, each ratio against the raw GETs onto the same filesystem. The default
is both when root (loop mounts need root), else ext4.

Network bed (--bed, default netns): SeaweedFS and the hubs run in a network namespace of their
own, reached over a veth pair (netshape.server_netns), as an object store and its hub sit in a
datacenter away from the client; their traffic among themselves (SeaweedFS's S3 gateway reading
its volume server, a proxying hub reading the store) stays inside it. Where that cannot be set up
(not root, no iproute2), or with --bed lo, everything runs on loopback as before.

Shaped link (--link-mbit N, default 1000, 0 skips it; root and tc): the pull rows again (each
client filesystem's right after its unshaped ones, so that one filesystem's writeback never runs
under the other's rows) and the two S3 push rows over one N Mbit/s link, so that the object store's
bytes are no longer free, as in any deployment. On the netns bed, a tbf on each end of the veth
pair: one full-duplex link that only the client's traffic crosses. On the lo bed, a tbf on lo
(netshape.shaped_loopback): every byte on lo shares the one link, both directions and the
servers' own hops (SeaweedFS's volume-to-gateway copy, a proxied pull's store-to-hub bytes), so
each object crosses it twice; if lo already has a qdisc (another shaped benchmark), it waits for
it to go (up to --link-wait seconds) and says so when it gave up. The shaped push goes into a
fresh prefix through a hub of its own.

Two raw boto3 GET rows per client filesystem: "raw boto3 GETs of the same objects" runs in this
process, with a boto3 client built beforehand and its connections warm from earlier rows; "raw
boto3 GETs, a fresh process (start-up included)" runs the same GETs in a new ``python -c``
process that imports boto3, builds its client and downloads, timed from spawn to exit, as a
``forkd pull`` process is timed. The goal line names both.

The tree's packages are compiled to bytecode first (common.compile_tree), as an installed
client's are: with PYTHONDONTWRITEBYTECODE set, every forkd process would otherwise compile them
from source (boto3, installed by pip, is compiled already).

Ratios: raw time / forkd time (1.0 = as fast as raw boto3 in-process). The forkd side includes
process start-up, decompression, blake3 verification of every chunk and writing the three memory
images.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chain_pull_vs_skopeo import import_chain, make_chain, xfs_mount  # noqa: E402
from common import MACHINE_NOTE, MiB, compile_tree, human, mib_s, print_table, timed  # noqa: E402
from netshape import ServerNetns, server_netns, shaped_loopback  # noqa: E402
from procs import ForkdUser, HubServer, log_summary  # noqa: E402

from manifest.fileops import data_ranges  # noqa: E402
from tests.services.seaweedfs import SeaweedFS  # noqa: E402

PARALLEL = 4
PULL_ROWS = (
    ("forkd via 307 presigned redirects", "redirected"),
    ("forkd proxied through the hub", "proxied"),
    ("raw boto3 GETs of the same objects", "raw"),
    ("raw boto3 GETs, a fresh process (start-up included)", "raw_proc"),
    ("fair peer: raw GETs + write 3 images + fsync", "fair"),
)
SETTLE_S = 5.0  # before each group of pull rows: see settle()
XFS_GIB = 6  # sparse image: three 512 MiB memory images, staging, and raw boto3's 234.5 MiB


def objects(client, bucket: str, prefix: str) -> list[tuple[str, int]]:
    out, kwargs = [], {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = client.list_objects_v2(**kwargs)
        out += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return out
        kwargs["ContinuationToken"] = page["NextContinuationToken"]


def raw_get(client, bucket: str, keys: list[str], dest: Path) -> None:
    from boto3.s3.transfer import TransferConfig

    config = TransferConfig(multipart_chunksize=8 * MiB, max_concurrency=PARALLEL)

    def one(index_key: tuple[int, str]) -> None:
        index, key = index_key
        client.download_file(bucket, key, str(dest / f"o{index}"), Config=config)

    dest.mkdir(parents=True)
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(one, enumerate(keys)))


#: raw_get in a process of its own: import boto3, build the client, download, exit (what a CLI pays)
RAW_GET_PROCESS = """
import json, os, sys
from concurrent.futures import ThreadPoolExecutor
import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
endpoint, bucket, dest, parallel, chunk = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
keys = json.load(sys.stdin)
client = boto3.client("s3", endpoint_url=endpoint, config=Config(retries={"mode": "standard", "max_attempts": 2}))
config = TransferConfig(multipart_chunksize=chunk, max_concurrency=parallel)
os.makedirs(dest)
def one(index_key):
    client.download_file(bucket, index_key[1], os.path.join(dest, f"o{index_key[0]}"), Config=config)
with ThreadPoolExecutor(parallel) as pool:
    list(pool.map(one, enumerate(keys)))
"""


def raw_get_process(endpoint: str, bucket: str, keys: list[str], dest: Path) -> None:
    """:func:`raw_get` by a fresh ``python -c`` process (interpreter start, ``import boto3``, a new
    client and new connections included), as a ``forkd pull`` process pays them; timed spawn to exit.
    Credentials come from the environment (the AWS variables)."""
    subprocess.run(
        [sys.executable, "-c", RAW_GET_PROCESS, endpoint, bucket, str(dest), str(PARALLEL), str(8 * MiB)],
        input=json.dumps(keys),
        text=True,
        check=True,
        timeout=600,
    )


def write_images(images: list[Path], dest: Path) -> None:
    """The fair peer's second half: write each assembled memory image (its data regions, holes
    kept, 8 MiB ``pwrite``s, one thread per image) to ``dest`` and fsync it, as a pull must."""

    def one(index_src: tuple[int, Path]) -> None:
        index, src = index_src
        with open(src, "rb") as f, open(dest / f"image{index}", "wb") as out:
            size = os.fstat(f.fileno()).st_size
            out.truncate(size)
            for start, length in data_ranges(f.fileno(), size):
                for pos in range(start, start + length, 8 * MiB):
                    os.pwrite(out.fileno(), os.pread(f.fileno(), min(8 * MiB, start + length - pos), pos), pos)
            os.fsync(out.fileno())

    dest.mkdir()
    with ThreadPoolExecutor(len(images)) as pool:
        list(pool.map(one, enumerate(images)))


@contextlib.contextmanager
def shaped_link(mbit: int, wait_s: float, poll_s: float = 10.0) -> Iterator[str | None]:
    """``shaped_loopback(mbit)``, waiting (up to ``wait_s``) while another benchmark's qdisc is on lo.
    Yields None while shaped, else why not (saying it gave up waiting, when it did)."""
    deadline = time.monotonic() + wait_s
    waited = 0.0
    while True:
        with shaped_loopback(mbit) as why:
            busy = why is not None and why.startswith("lo already has a qdisc")
            if not busy or time.monotonic() >= deadline:
                if busy:
                    why = f"{why}; gave up after waiting {waited:.0f} s for it to go"
                elif why is None and waited:
                    print(f"s3_pull: lo was busy; shaped after waiting {waited:.0f} s", file=sys.stderr)
                yield why
                return
        print(f"s3_pull: {why}; waiting for it to go", file=sys.stderr)
        time.sleep(poll_s)
        waited += poll_s


def lo_is_free() -> bool:
    """Whether loopback has no qdisc (no other benchmark's shaping); True where tc cannot tell."""
    if shutil.which("tc") is None:
        return True
    shown = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True, timeout=30)
    return shown.returncode != 0 or shown.stdout.startswith("qdisc noqueue")


def wait_for_free_lo(wait_s: float, poll_s: float = 10.0) -> str | None:
    """Before unshaped rows: wait (up to ``wait_s``) while another benchmark shapes lo, whose
    shaping would slow these rows too. None when lo is free, else a note for the output."""
    waited = 0.0
    while not lo_is_free():
        if waited >= wait_s:
            return f"lo was still shaped by another benchmark after {waited:.0f} s: the loopback rows ran shaped"
        print("s3_pull: lo is shaped by another benchmark; waiting for it to go", file=sys.stderr)
        time.sleep(poll_s)
        waited += poll_s
    return None


def pull_rows(
    where: Path, redirecting, proxying, client, endpoint: str, bucket: str, keys: list[str], images: list[Path]
) -> dict:
    """Seconds of a cold ``forkd pull`` through each hub with the client's store under ``where``,
    then of raw boto3 GETs of ``keys`` into ``where/raw-get`` (kept: the raw push uploads them), in
    this process (a warm client) and by a fresh process (:func:`raw_get_process`), then of the fair
    peer: the same GETs into ``where/fair-get`` plus ``images`` written and fsynced. Nothing is
    deleted between the rows (freeing gigabytes on a filesystem mounted with ``discard`` slows the
    disk for seconds after): what the rows wrote goes at the end, and the disk is left to settle."""
    settle()
    where.mkdir()
    times = {}
    for name, hub in (("redirected", redirecting), ("proxied", proxying)):
        user = ForkdUser(where / f"puller-{name}", hub.url)
        times[name] = timed(lambda: user.run("pull", "acme/chain:v1", "--as", "head"))  # noqa: B023
    times["raw"] = timed(lambda: raw_get(client, bucket, keys, where / "raw-get"))
    times["raw_proc"] = timed(lambda: raw_get_process(endpoint, bucket, keys, where / "raw-proc-get"))

    def fair() -> None:
        raw_get(client, bucket, keys, where / "fair-get")
        write_images(images, where / "fair-images")

    times["fair"] = timed(fair)
    for done in ("puller-redirected", "puller-proxied", "raw-proc-get", "fair-get", "fair-images"):
        shutil.rmtree(where / done)
    return times


def settle(seconds: float = SETTLE_S) -> None:
    """Write back what earlier rows left dirty and give the disk ``seconds`` to finish what their
    deletions queued (discards), before a group of timed rows."""
    os.sync()
    time.sleep(seconds)


def raw_put(client, bucket: str, files: list[tuple[Path, str]]) -> None:
    from boto3.s3.transfer import TransferConfig

    config = TransferConfig(multipart_threshold=16 * MiB, multipart_chunksize=16 * MiB, max_concurrency=PARALLEL)
    for path, key in files:
        client.upload_file(str(path), bucket, key, Config=config)


def shaped_push(
    root: Path, weed: SeaweedFS, pusher: ForkdUser, client, files: list[tuple[Path, str]], servers: dict
) -> dict:
    """The S3 push rows on the shaped link: ``forkd push`` into a fresh prefix through a hub of its own
    (started with ``servers``: HubServer's host and launcher), and raw boto3 multipart of the same
    objects under another fresh prefix."""
    env = {
        "FORKD_HUB_STORAGE": weed.storage_spec(prefix="bench-chain-shaped"),
        "FORKD_HUB_DATABASE_URL": f"sqlite+aiosqlite:///{root / 'hub-shaped.db'}",
    }
    with HubServer(root / "hub-s", root / "hub-s.log", env=env, **servers) as hub:
        user = ForkdUser(root / "pusher-shaped", hub.url, hub.token("bench", "push:acme/*"), home=pusher.home)
        push_t = timed(lambda: user.run("push", "link2", "acme/chain:v1", "--public"))
    shaped_files = [(path, "raw-put-shaped/" + key.split("/", 1)[1]) for path, key in files]
    raw_t = timed(lambda: raw_put(client, weed.bucket, shaped_files))
    return {"push": push_t, "raw_put": raw_t}


def _row(label: str, seconds: float, raw_seconds: float, stored_bytes: int) -> list[str]:
    """One table row: seconds, MiB/s of the stored bytes, and raw time / this time."""
    return [label, f"{seconds:.2f}", f"{mib_s(stored_bytes, seconds):.0f}", f"{raw_seconds / seconds:.2f}"]


def _goal(times: dict) -> str:
    """The issue's goal line, against both raw peers: the in-process GETs (warm client and
    connections, no start-up) and the fresh process (start-up, import, new connections included)."""
    return (
        f"{times['raw'] / times['redirected']:.0%} of raw speed in-process (warm client), "
        f"{times['raw_proc'] / times['redirected']:.0%} of a fresh raw process (start-up included) (goal >= 80%)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mem-mib", type=int, default=512)
    ap.add_argument("--data-fraction", type=float, default=0.5)
    ap.add_argument("--dirty", type=float, default=0.03)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument(
        "--client-fs",
        choices=("both", "ext4", "xfs"),
        default=None,
        help="filesystem of the pulling client's store and of raw boto3's files: the work dir's own "
        "(ext4), a loop-mounted XFS with reflink (xfs, needs root), or both (default: both when root, else ext4)",
    )
    ap.add_argument(
        "--link-mbit",
        type=int,
        default=1000,
        help="also run the pull rows (and the S3 push rows) with loopback shaped to this many Mbit/s "
        "(root, tc); 0 skips it",
    )
    ap.add_argument(
        "--bed",
        choices=("netns", "lo"),
        default="netns",
        help="netns: the servers in a network namespace of their own behind a veth pair, the shaped link "
        "on that pair (root, iproute2); lo: everything on loopback, the shaped link a tbf on lo "
        "(default: netns, falling back to lo where it cannot be set up)",
    )
    ap.add_argument(
        "--link-wait",
        type=float,
        default=900,
        help="seconds to wait for another benchmark's qdisc on lo to go before giving up the shaped rows",
    )
    args = ap.parse_args()
    client_fs = args.client_fs or ("both" if os.geteuid() == 0 else "ext4")
    root = Path(tempfile.mkdtemp(prefix="s3-pull-", dir=args.dir))
    compile_tree()  # the forkd processes start as an installed client does, bytecode compiled
    load_start = os.getloadavg()
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        bed: ServerNetns | str = stack.enter_context(server_netns()) if args.bed == "netns" else "--bed lo"
        if isinstance(bed, str) and args.bed == "netns":
            print(f"s3_pull: no network namespace for the servers ({bed}); everything on loopback", file=sys.stderr)
        # how the hubs and SeaweedFS start: in the servers' namespace, listening on its end of the pair
        servers: dict[str, Any] = {}
        bed_note = (
            "everything on loopback; shaped rows: a tbf on lo (every byte shares one link, both directions "
            "and the servers' own hops: each object crosses it twice)"
        )
        if isinstance(bed, ServerNetns):
            servers = {"host": bed.server_ip, "launcher": bed.launcher}
            bed_note = (
                f"SeaweedFS and the hubs in network namespace {bed.name} behind a veth pair; unshaped rows: "
                "the pair at full speed; shaped rows: a tbf on each end (one full-duplex link only the client's "
                "traffic crosses)"
            )
        weed = SeaweedFS(**servers)
        weed.start()
        stack.callback(weed.stop)
        os.environ.update(weed.env)
        client = weed.client()
        chain = make_chain(root, args.mem_mib * MiB, args.data_fraction, args.dirty, 0)
        prefix = "bench-chain"
        store_env = {
            "FORKD_HUB_STORAGE": weed.storage_spec(prefix=prefix),
            "FORKD_HUB_DATABASE_URL": f"sqlite+aiosqlite:///{root / 'hub.db'}",
        }
        redirecting = stack.enter_context(HubServer(root / "hub-r", root / "hub-r.log", env=store_env, **servers))
        proxying = stack.enter_context(
            HubServer(
                root / "hub-p", root / "hub-p.log", env={**store_env, "FORKD_HUB_BLOB_REDIRECTS": "false"}, **servers
            )
        )
        token = redirecting.token("bench", "push:acme/*")

        pusher = ForkdUser(root / "pusher", redirecting.url, token)
        import_chain(pusher, chain)
        push_t = timed(lambda: pusher.run("push", "link2", "acme/chain:v1", "--public"))
        # format v2: data frames live in packs/ (a data blob is a recipe over them), the rest in blobs/
        stored = objects(client, weed.bucket, prefix + "/blobs/") + objects(client, weed.bucket, prefix + "/packs/")
        stored_bytes = sum(size for _, size in stored)

        keys = [k for k, _ in stored]
        images = [src / "memory.bin" for src in chain.srcs]  # what the pull assembles, for the fair peer
        client_dirs: dict[str, Path] = {}  # client filesystem -> where its store and raw GETs go
        if client_fs in ("both", "ext4"):
            client_dirs["ext4"] = root / "client-ext4"
        if client_fs in ("both", "xfs"):
            mnt, why_not = stack.enter_context(xfs_mount(root, XFS_GIB))  # unmounted on exit; image under root
            if mnt is None:
                sys.exit(f"s3_pull: --client-fs {client_fs} needs an XFS loop mount: {why_not}")
            client_dirs["xfs"] = mnt / "client-xfs"

        def shaping() -> contextlib.AbstractContextManager[str | None]:
            """The shaped link for the length of a ``with`` block (None), or why there is none."""
            if isinstance(bed, ServerNetns):
                return bed.shaped(args.link_mbit)
            return shaped_link(args.link_mbit, args.link_wait)

        def rows(where: Path) -> dict:
            return pull_rows(where, redirecting, proxying, client, weed.endpoint, weed.bucket, keys, images)

        # one client filesystem at a time, its rows over the shaped link right after its unshaped
        # ones: the other filesystem's rows never run in between (a loop-mounted XFS's writeback,
        # through its image file on the host filesystem, slowed the next rows on it by up to 2x)
        lo_notes: dict[str, str | None] = {}  # client filesystem -> why its loopback rows ran shaped
        pulls = {}  # client filesystem -> contender -> seconds
        shaped_pulls: dict[str, dict] = {}  # the same over the shaped link
        shaped_why: str | None = "--link-mbit 0"
        load_shaped: tuple[float, float, float] | None = None
        for fs, where in client_dirs.items():
            lo_notes[fs] = None if servers else wait_for_free_lo(args.link_wait)
            pulls[fs] = rows(where)
            if args.link_mbit:
                with shaping() as shaped_why:
                    if shaped_why is None:
                        load_shaped = load_shaped or os.getloadavg()
                        shaped_pulls[fs] = rows(where.parent / f"{where.name}-shaped")
        first_fs = next(iter(pulls))
        raw_dir = client_dirs[first_fs] / "raw-get"
        raw_get_t = pulls[first_fs]["raw"]

        # the same client work without S3: a hub on its default filesystem store
        local = stack.enter_context(HubServer(root / "hub-fs", root / "hub-fs.log", **servers))
        fs_pusher = ForkdUser(root / "pusher-fs", local.url, local.token("bench", "push:acme/*"), home=pusher.home)
        fs_push_t = timed(lambda: fs_pusher.run("push", "link2", "acme/chain:v1", "--public"))
        fs_user = ForkdUser(client_dirs[first_fs] / "puller-fs", local.url)
        fs_pull_t = timed(lambda: fs_user.run("pull", "acme/chain:v1", "--as", "head"))

        files = [(raw_dir / f"o{i}", f"raw-put/{key}") for i, (key, _) in enumerate(stored)]
        raw_put_t = timed(lambda: raw_put(client, weed.bucket, files))

        # the S3 push rows over the shaped link too
        shaped_pushes: dict = {}
        if args.link_mbit and shaped_pulls:
            with shaping() as shaped_why:
                if shaped_why is None:
                    shaped_pushes = shaped_push(root, weed, pusher, client, files, servers)
        logs = {"redirecting": root / "hub-r.log", "proxied": root / "hub-p.log", "filesystem": root / "hub-fs.log"}
        if shaped_pushes:
            logs["shaped push"] = root / "hub-s.log"
        problems = log_summary(**logs)
        load_end = os.getloadavg()

    print(
        f"s3_pull: 3-link chain, memory.bin {human(args.mem_mib * MiB)} each, {len(stored)} objects, "
        f"{human(stored_bytes)} stored on SeaweedFS; {MACHINE_NOTE}"
    )
    rows = []
    for fs, times in pulls.items():
        rows += [_row(f"pull to {fs}: {label}", times[key], times["raw"], stored_bytes) for label, key in PULL_ROWS]
    rows += [
        _row(f"pull to {first_fs}: forkd from a filesystem hub (no S3)", fs_pull_t, raw_get_t, stored_bytes),
        _row("push: forkd push through the hub", push_t, raw_put_t, stored_bytes),
        _row("push: raw boto3 multipart of the same objects", raw_put_t, raw_put_t, stored_bytes),
        _row("push: forkd push to a filesystem hub (no S3)", fs_push_t, raw_put_t, stored_bytes),
    ]
    link = f"{args.link_mbit} Mbit/s"
    for fs, times in shaped_pulls.items():
        rows += [
            _row(f"{link}, pull to {fs}: {label}", times[key], times["raw"], stored_bytes) for label, key in PULL_ROWS
        ]
    if shaped_pushes:
        push_s, raw_s = shaped_pushes["push"], shaped_pushes["raw_put"]
        rows += [
            _row(f"{link}, push: forkd push through the hub", push_s, raw_s, stored_bytes),
            _row(f"{link}, push: raw boto3 multipart of the same objects", raw_s, raw_s, stored_bytes),
        ]
    print(f"bed: {bed_note}")
    print_table(["one run", "seconds", "MiB/s stored", "raw / this"], rows)
    for fs, times in pulls.items():
        print(
            f"client on {fs}: redirected pull vs raw boto3: {_goal(times)}; "
            f"redirected vs proxied: {times['proxied'] / times['redirected']:.2f}x"
        )
    for fs, times in pulls.items():
        print(
            f"client on {fs}: fair peer (raw GETs + images written and fsynced): redirected pull at "
            f"{times['fair'] / times['redirected']:.0%} of its speed"
        )
    print(f"client on {first_fs}: redirected vs the filesystem hub: {fs_pull_t / pulls[first_fs]['redirected']:.2f}x")
    if shaped_why is not None or load_shaped is None:
        print(f"shaped link: skipped: {shaped_why}")
    else:
        floor = stored_bytes * 8 / (args.link_mbit * 1e6)
        print(
            f"{link} link ({'tbf on each end of the veth pair' if servers else 'tc tbf on lo'}; load average at "
            f"its start {load_shaped[0]:.1f}); wire floor of the stored bytes {floor:.2f} s:"
        )
        for fs, times in shaped_pulls.items():
            print(
                f"{link} link, client on {fs}: redirected pull vs raw boto3: {_goal(times)}; "
                f"redirected vs proxied: {times['proxied'] / times['redirected']:.2f}x"
            )
        for fs, times in shaped_pulls.items():
            print(
                f"{link} link, client on {fs}: fair peer (raw GETs + images written and fsynced): redirected pull at "
                f"{times['fair'] / times['redirected']:.0%} of its speed"
            )
        if shaped_pushes:
            print(
                f"{link} link: forkd push vs raw boto3 multipart: {shaped_pushes['raw_put'] / shaped_pushes['push']:.2f}x"
            )
    for fs, note in lo_notes.items():
        if note is not None:
            print(f"client on {fs}: {note}")
    print(f"load average at the start {load_start[0]:.1f}, at the end {load_end[0]:.1f}")
    print(problems)


if __name__ == "__main__":
    main()
