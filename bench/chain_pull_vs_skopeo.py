#!/usr/bin/env python3
"""A 3-link snapshot chain through forkd-hub vs docker-registry + skopeo holding it the forkd way.

Usage: python bench/chain_pull_vs_skopeo.py [--mem-mib 512] [--data-fraction 0.5] [--dirty 0.03]
                                            [--repeat 3] [--warmup 1] [--xfs-gib 8] [--no-xfs]
                                            [--link-mbit 1000]
                                            [--dir DIR]

The chain: a base memory.bin of --mem-mib, half of it data (random 4 MiB blocks, alternately
random and text-like) and half holes; two links on it, each rewriting --dirty of the image in
64 KiB runs at random page-aligned offsets (in data or holes, as a guest does). Each link has a
small vmstate. The peer stores the chain the way forkd itself does, one full memory image per
link: one OCI image whose layers are the three memory.bin files and the three vmstates, as they
are (uncompressed, ``--preserve-digests``), in Debian's docker-registry 2.8, moved with skopeo.

(a) cold pull of the chain: ``forkd pull`` into an empty store (anonymous, public repository) vs
    ``skopeo copy docker://… oci:DIR`` into an empty directory (blob-info cache deleted first).
(a') the same cold pulls with loopback shaped to --link-mbit (tc tbf on lo, root only): hub and
    registry then sit behind one real-sized network link instead of free loopback bytes.
(b) push of a new child link while the chain is already there: ``forkd push`` of the child (the
    same client pushed the chain) vs ``skopeo copy oci:… docker://…`` of the image with the new
    full memory image appended (the six existing blobs are found by HEAD and skipped). Every run
    pushes a different child, so nothing was uploaded before.
(c) client disk used by the pulled chain on a loop-mounted XFS with reflink (needs root), from
    statvfs deltas: forkd's store (FORKD_HOME on the mount) vs skopeo's OCI directory vs plain
    sparse copies of the three memory images (forkd's own layout without reflinks).
(c') the cold pulls of (a) again, both clients writing to that XFS (where forkd's links are
    reflinks of their parents instead of copies).

Runs of forkd and skopeo alternate, each started after ``sync`` (neither waits behind the other's
writeback). Times include process start-up (forkd is Python, skopeo Go). Client CPU is the
user + system time of the client process (not the servers'): on loopback, where bytes cost only
CPU and the servers share the same 2 cores, the time ratio follows it.
Bytes moved come from one more, untimed run of each through a byte-counting TCP proxy (HTTP
headers included). Ratios are skopeo / forkd, measured in this run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, GiB, MiB, human, median, print_table, timed, timed_cpu  # noqa: E402
from images import allocated, fs_used, make_child_image, make_memory_image, make_vmstate, sparse_copy  # noqa: E402
from netshape import shaped_loopback  # noqa: E402
from oci import sha256_file, skopeo_clear_cache, skopeo_copy, write_oci_layout  # noqa: E402
from procs import ForkdUser, HubServer, RegistryServer, log_summary  # noqa: E402
from proxy import CountingProxy  # noqa: E402

TAGS = ["base", "link1", "link2"]


@dataclass
class Chain:
    srcs: list[Path]  # one dir per link: memory.bin + vmstate
    changed: list[int]  # bytes changed per link against its parent, in 4 KiB pages (base: its data)
    children: list[Path] = field(default_factory=list)  # new child links for (b)
    child_changed: list[int] = field(default_factory=list)
    digests: dict[Path, str] = field(default_factory=dict)

    def layer_files(self) -> list[Path]:
        return [p for src in self.srcs for p in (src / "memory.bin", src / "vmstate")]


def make_chain(root: Path, mem: int, data_fraction: float, dirty: float, children: int) -> Chain:
    base = root / "src-base"
    base.mkdir()
    info = make_memory_image(base / "memory.bin", mem, int(mem * data_fraction), seed=11)
    make_vmstate(base / "vmstate", seed=11)
    chain = Chain([base], [info.data_bytes])
    for i in (1, 2):
        d = root / f"src-link{i}"
        d.mkdir()
        chain.changed.append(make_child_image(chain.srcs[-1] / "memory.bin", d / "memory.bin", dirty, seed=100 + i))
        make_vmstate(d / "vmstate", seed=100 + i)
        chain.srcs.append(d)
    for i in range(children):
        d = root / f"src-child{i}"
        d.mkdir()
        chain.child_changed.append(
            make_child_image(chain.srcs[-1] / "memory.bin", d / "memory.bin", dirty, seed=200 + i)
        )
        make_vmstate(d / "vmstate", seed=200 + i)
        chain.children.append(d)
    return chain


def import_chain(user: ForkdUser, chain: Chain) -> None:
    for i, (src, tag) in enumerate(zip(chain.srcs, TAGS, strict=False)):
        user.run("import", str(src), tag, *(["--parent", TAGS[i - 1]] if i else []))


def pull_times(root: Path, hub: HubServer, registry: RegistryServer, repeat: int, warmup: int = 0) -> dict:
    """Alternating cold pulls into empty directories: wall and client CPU seconds of each tool
    (``forkd_t``, ``forkd_cpu``, ``skopeo_t``, ``skopeo_cpu``) and forkd's ``--json`` reports.
    The first ``warmup`` rounds are run the same way and not counted."""
    runs: dict[str, list] = {"forkd": [], "skopeo": [], "reports": []}
    for i in range(warmup + repeat):
        user = ForkdUser(root / f"puller{i}", hub.url)
        runs["forkd"].append(
            timed_cpu(lambda: runs["reports"].append(user.json("pull", "acme/chain:v1", "--as", "head")))
        )
        shutil.rmtree(user.root)
        out = root / f"oci-pull{i}"
        skopeo_clear_cache()
        runs["skopeo"].append(
            timed_cpu(lambda: skopeo_copy(f"docker://{registry.host}/bench/chain:v1", f"oci:{out}:v1"))
        )
        shutil.rmtree(out)
    result: dict = {"reports": runs["reports"][warmup:]}
    for tool in ("forkd", "skopeo"):
        result[f"{tool}_t"] = [wall for wall, _ in runs[tool][warmup:]]
        result[f"{tool}_cpu"] = [cpu for _, cpu in runs[tool][warmup:]]
    return result


def bench_pull(
    root: Path, hub: HubServer, registry: RegistryServer, repeat: int, warmup: int, stack: contextlib.ExitStack
) -> dict:
    timing = pull_times(root, hub, registry, repeat, warmup)
    # bytes on the wire, untimed, through counting proxies
    hub_proxy = stack.enter_context(CountingProxy(hub.port))
    reg_proxy = stack.enter_context(CountingProxy(registry.port))
    user = ForkdUser(root / "puller-counted", hub_proxy.url)
    user.json("pull", "acme/chain:v1", "--as", "head")
    forkd_up, forkd_down = hub_proxy.reset()
    head = user.home / "snapshots" / "head" / "memory.bin"
    skopeo_clear_cache()
    skopeo_copy(f"docker://{reg_proxy.host}/bench/chain:v1", f"oci:{root / 'oci-counted'}:v1")
    skopeo_up, skopeo_down = reg_proxy.reset()
    return {
        **timing,
        "report": timing["reports"][-1],
        "forkd_wire": (forkd_up, forkd_down),
        "skopeo_wire": (skopeo_up, skopeo_down),
        "head_sha": sha256_file(head),
        "skopeo_dir": root / "oci-counted",
        "counted_home": user.root,
    }


def bench_shaped_pull(root: Path, hub: HubServer, registry: RegistryServer, repeat: int, mbit: int) -> dict:
    """(a) again with every loopback byte through one ``mbit`` Mbit/s link (tc tbf on lo)."""
    with shaped_loopback(mbit) as why:
        if why is not None:
            return {"skipped": why}
        return pull_times(root, hub, registry, repeat)


def bench_push(
    root: Path,
    hub: HubServer,
    registry: RegistryServer,
    pusher: ForkdUser,
    chain: Chain,
    layout: Path,
    repeat: int,
    stack: contextlib.ExitStack,
) -> dict:
    forkd_t, skopeo_t, reports = [], [], []
    base_layers = chain.layer_files()
    for i in range(repeat):
        child = chain.children[i]
        pusher.run("import", str(child), f"child{i}", "--parent", "link2")
        forkd_t.append(timed(lambda: reports.append(pusher.json("push", f"child{i}", "acme/chain:v2"))))
        chain.digests = write_oci_layout(
            layout, f"v2-{i}", [*base_layers, child / "memory.bin", child / "vmstate"], digests=chain.digests
        )
        skopeo_clear_cache()
        skopeo_t.append(timed(lambda: skopeo_copy(f"oci:{layout}:v2-{i}", f"docker://{registry.host}/bench/chain:v2")))
    # bytes on the wire: a second client that knows the chain is on the hub pushes one more child
    hub_proxy = stack.enter_context(CountingProxy(hub.port))
    reg_proxy = stack.enter_context(CountingProxy(registry.port))
    child = chain.children[repeat]
    counted = ForkdUser(root / "pusher-counted", hub_proxy.url, hub.token("counted", "push:acme/*"))
    import_chain(counted, chain)
    counted.json("push", "link2", "acme/chain:v1")  # already there: learns that, uploads nothing
    counted.run("import", str(child), "childx", "--parent", "link2")
    hub_proxy.reset()
    counted_report = counted.json("push", "childx", "acme/chain:v2")
    forkd_up, forkd_down = hub_proxy.reset()
    chain.digests = write_oci_layout(
        layout, "v2-x", [*base_layers, child / "memory.bin", child / "vmstate"], digests=chain.digests
    )
    skopeo_clear_cache()
    skopeo_copy(f"oci:{layout}:v2-x", f"docker://{reg_proxy.host}/bench/chain:v2")
    skopeo_up, skopeo_down = reg_proxy.reset()
    shutil.rmtree(counted.root)
    return {
        "forkd_t": forkd_t,
        "skopeo_t": skopeo_t,
        "reports": reports,
        "counted_report": counted_report,
        "counted_changed": chain.child_changed[repeat],
        "forkd_wire": (forkd_up, forkd_down),
        "skopeo_wire": (skopeo_up, skopeo_down),
    }


@contextlib.contextmanager
def xfs_mount(root: Path, gib: int):
    """A loop-mounted XFS with reflink under ``root``; yields the mount point or a reason it cannot."""
    if os.geteuid() != 0:
        yield None, "not root (loop mounts need root)"
        return
    if shutil.which("mkfs.xfs") is None:
        yield None, "mkfs.xfs missing (scripts/install-bench-deps.sh installs xfsprogs)"
        return
    img, mnt = root / "xfs.img", root / "xfs"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(gib * GiB)
    made = subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(img)], capture_output=True, text=True)
    mounted = (
        made.returncode == 0
        and subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True, text=True).returncode == 0
    )
    if not mounted:
        yield None, f"could not make or loop-mount an XFS image ({made.stderr.strip() or 'mount failed'})"
        return
    try:
        yield mnt, None
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)  # something still holds it: detach lazily


def bench_disk(mnt: Path, hub: HubServer, registry: RegistryServer, chain: Chain) -> dict:
    """Each contender adds its files to the mount and is measured by the statvfs delta; nothing is
    deleted in between (XFS frees blocks in the background, which would blur later deltas)."""
    out: dict[str, int | float] = {}
    before = settled_used(mnt)
    user = ForkdUser(mnt / "forkd", hub.url)
    user.json("pull", "acme/chain:v1", "--as", "head")
    out["forkd_total"] = settled_used(mnt) - before
    staging = user.home / ".staging"
    out["forkd_staging_left"] = sum(1 for _ in staging.iterdir()) if staging.exists() else 0
    out["forkd_snapshot_blocks"] = allocated(user.home / "snapshots")  # st_blocks: shared extents counted per file

    before = settled_used(mnt)
    skopeo_clear_cache()
    skopeo_copy(f"docker://{registry.host}/bench/chain:v1", f"oci:{mnt / 'oci'}:v1")
    out["skopeo"] = settled_used(mnt) - before

    before = settled_used(mnt)
    (mnt / "copies").mkdir()
    for src, tag in zip(chain.srcs, TAGS, strict=False):
        sparse_copy(src / "memory.bin", mnt / "copies" / f"{tag}.memory.bin")
        shutil.copyfile(src / "vmstate", mnt / "copies" / f"{tag}.vmstate")
    out["sparse_copies"] = settled_used(mnt) - before
    return out


def settled_used(mnt: Path, timeout: float = 10) -> int:
    """statvfs used bytes once it stops moving (sync, then two equal readings 0.2 s apart)."""
    last = fs_used(mnt)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = fs_used(mnt)
        if now == last:
            return now
        last = now
    return last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mem-mib", type=int, default=512, help="apparent size of each memory.bin")
    ap.add_argument("--data-fraction", type=float, default=0.5, help="share of the base that holds data")
    ap.add_argument("--dirty", type=float, default=0.03, help="share of the image each link rewrites")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds of (a) before the timed ones (both tools)")
    ap.add_argument("--xfs-gib", type=int, default=8, help="size of the loop-mounted XFS for (c) (a sparse file)")
    ap.add_argument("--no-xfs", action="store_true", help="skip (c)")
    ap.add_argument(
        "--link-mbit",
        type=int,
        default=1000,
        help="also time (a) with loopback shaped to this many Mbit/s (root, tc); 0 skips it",
    )
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()
    if not shutil.which("skopeo") or not shutil.which("docker-registry"):
        sys.exit("skopeo and docker-registry are needed: run scripts/install-bench-deps.sh")

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="chain-bench-") as tmp, contextlib.ExitStack() as stack:
        root = Path(tmp)
        chain = make_chain(root, args.mem_mib * MiB, args.data_fraction, args.dirty, args.repeat + 1)
        hub = stack.enter_context(HubServer(root / "hub", root / "hub.log"))
        registry = stack.enter_context(RegistryServer(root / "registry", root / "registry.log"))

        pusher = ForkdUser(root / "pusher", hub.url, hub.token("pusher", "push:acme/*"))
        import_chain(pusher, chain)
        chain_push = pusher.json("push", "link2", "acme/chain:v1", "--public")
        layout = root / "oci-src"
        chain.digests = write_oci_layout(layout, "v1", chain.layer_files())
        skopeo_clear_cache()
        skopeo_copy(f"oci:{layout}:v1", f"docker://{registry.host}/bench/chain:v1")

        pull = bench_pull(root, hub, registry, args.repeat, args.warmup, stack)
        pull_ok = pull["head_sha"] == chain.digests[chain.srcs[-1] / "memory.bin"]
        oci_blobs = pull["skopeo_dir"] / "blobs" / "sha256"
        skopeo_ok = all((oci_blobs / chain.digests[f]).is_file() for f in chain.layer_files())
        shutil.rmtree(pull["skopeo_dir"])
        shutil.rmtree(pull["counted_home"])
        shaped = (
            bench_shaped_pull(root, hub, registry, args.repeat, args.link_mbit)
            if args.link_mbit
            else {"skipped": "--link-mbit 0"}
        )
        push = bench_push(root, hub, registry, pusher, chain, layout, args.repeat, stack)
        if args.no_xfs:
            disk, why = None, "--no-xfs"
        else:
            with xfs_mount(root, args.xfs_gib) as (mnt, why):
                disk = bench_disk(mnt, hub, registry, chain) if mnt else None
                if disk is not None:  # then timed cold pulls with both clients writing to this XFS
                    for measured in ("forkd", "oci", "copies"):
                        shutil.rmtree(mnt / measured)
                    (mnt / "timed").mkdir()
                    disk.update(pull_times(mnt / "timed", hub, registry, args.repeat))
        stack.close()  # stop the servers so their logs are complete
        logs = log_summary(hub=root / "hub.log", registry=root / "registry.log")

    mem = args.mem_mib * MiB
    logical = len(chain.srcs) * mem
    print(
        f"chain_pull_vs_skopeo: 3-link chain, memory.bin {human(mem)} each, base {args.data_fraction:.0%} data, "
        f"links rewrite {args.dirty:.0%} each (changed: {', '.join(human(c) for c in chain.changed[1:])} "
        f"in 4 KiB pages); median of {args.repeat} after {args.warmup} untimed round(s) of (a); {MACHINE_NOTE}"
    )
    print(
        f"setup: forkd push of the whole chain sent {human(chain_push['bytes_sent'])}; "
        f"pulled head identical: {pull_ok}; skopeo pulled every layer: {skopeo_ok}\n"
    )

    f_t, s_t = median(pull["forkd_t"]), median(pull["skopeo_t"])
    f_cpu, s_cpu = median(pull["forkd_cpu"]), median(pull["skopeo_cpu"])
    f_moved, s_moved = sum(pull["forkd_wire"]), sum(pull["skopeo_wire"])
    print_table(
        ["(a) cold pull of the chain", "runs (s)", "median s", "client CPU s", "bytes moved", "vs logical"],
        [
            [
                "forkd pull (hub)",
                "/".join(f"{t:.2f}" for t in pull["forkd_t"]),
                f"{f_t:.2f}",
                f"{f_cpu:.2f}",
                f"{f_moved:,}",
                f"{f_moved / logical:.3f}",
            ],
            [
                "skopeo copy (docker-registry)",
                "/".join(f"{t:.2f}" for t in pull["skopeo_t"]),
                f"{s_t:.2f}",
                f"{s_cpu:.2f}",
                f"{s_moved:,}",
                f"{s_moved / logical:.3f}",
            ],
            [
                "skopeo / forkd (goal >= 3x both)",
                "",
                f"{s_t / f_t:.2f}x",
                f"{s_cpu / f_cpu:.2f}x",
                f"{s_moved / f_moved:.2f}x",
                "",
            ],
        ],
    )
    print(
        f"forkd pull --json: bytes_received {pull['report']['bytes_received']:,}; per link "
        f"{[(ln['tag'], ln['chunks_fetched'], ln.get('chunks_local', 0)) for ln in pull['report']['links']]} "
        f"(tag, chunks fetched, chunks found locally); logical size of the chain {logical:,}\n"
    )

    if "skipped" in shaped:
        print(f"(a') shaped link skipped: {shaped['skipped']}\n")
    else:
        f_t, s_t = median(shaped["forkd_t"]), median(shaped["skopeo_t"])
        print_table(
            [f"(a') cold pull over a {args.link_mbit} Mbit/s link", "runs (s)", "median s", "wire floor s"],
            [
                [
                    "forkd pull (hub)",
                    "/".join(f"{t:.2f}" for t in shaped["forkd_t"]),
                    f"{f_t:.2f}",
                    f"{f_moved * 8 / (args.link_mbit * 1e6):.2f}",
                ],
                [
                    "skopeo copy (docker-registry)",
                    "/".join(f"{t:.2f}" for t in shaped["skopeo_t"]),
                    f"{s_t:.2f}",
                    f"{s_moved * 8 / (args.link_mbit * 1e6):.2f}",
                ],
                ["skopeo / forkd (goal >= 3x)", "", f"{s_t / f_t:.2f}x", f"{s_moved / f_moved:.2f}x"],
            ],
        )
        print("wire floor: bytes moved in (a) at the link's rate, the least any client could take\n")

    f_t, s_t = median(push["forkd_t"]), median(push["skopeo_t"])
    changed = push["counted_changed"]
    chunk_changed = push["counted_report"]["links"][-1]["changed_bytes"]
    f_sent, s_sent = push["forkd_wire"][0], push["skopeo_wire"][0]
    print_table(
        ["(b) push of a new child link", "runs (s)", "median s", "bytes sent", "/ changed bytes"],
        [
            [
                "forkd push (hub)",
                "/".join(f"{t:.2f}" for t in push["forkd_t"]),
                f"{f_t:.2f}",
                f"{f_sent:,}",
                f"{f_sent / changed:.2f}",
            ],
            [
                "skopeo copy (docker-registry)",
                "/".join(f"{t:.2f}" for t in push["skopeo_t"]),
                f"{s_t:.2f}",
                f"{s_sent:,}",
                f"{s_sent / changed:.2f}",
            ],
            ["changed bytes (4 KiB pages)", "", "", f"{changed:,}", "1.00"],
            [
                "changed 64 KiB chunks (forkd's changed_bytes)",
                "",
                "",
                f"{chunk_changed:,}",
                f"{chunk_changed / changed:.2f}",
            ],
            ["skopeo / forkd", "", f"{s_t / f_t:.2f}x", f"{s_sent / f_sent:.2f}x", ""],
        ],
    )
    print(
        f"forkd push --json bytes_sent per timed run: {[r['bytes_sent'] for r in push['reports']]}; "
        f"counted run: {push['counted_report']['bytes_sent']:,} (wire {f_sent:,} up, {push['forkd_wire'][1]:,} down)\n"
    )

    if disk is None:
        print(f"(c) skipped: {why}")
        print(logs)
        return
    print_table(
        ["(c) client disk after a cold pull (XFS, reflink)", "statvfs delta", "vs forkd"],
        [
            ["forkd pull: FORKD_HOME as left by the pull", human(disk["forkd_total"]), "1.00x"],
            [
                "skopeo: OCI directory (3 full images)",
                human(disk["skopeo"]),
                f"{disk['skopeo'] / disk['forkd_total']:.2f}x",
            ],
            [
                "3 sparse copies (forkd without reflink)",
                human(disk["sparse_copies"]),
                f"{disk['sparse_copies'] / disk['forkd_total']:.2f}x",
            ],
        ],
    )
    print(
        f"st_blocks of the forkd snapshots (shared extents counted per file): {human(disk['forkd_snapshot_blocks'])}; "
        f"staging entries left: {disk['forkd_staging_left']}"
    )
    f_t, s_t = median(disk["forkd_t"]), median(disk["skopeo_t"])
    print_table(
        ["(c') cold pull, client writing to this XFS", "runs (s)", "median s"],
        [
            ["forkd pull (hub)", "/".join(f"{t:.2f}" for t in disk["forkd_t"]), f"{f_t:.2f}"],
            ["skopeo copy (docker-registry)", "/".join(f"{t:.2f}" for t in disk["skopeo_t"]), f"{s_t:.2f}"],
            ["skopeo / forkd (goal >= 3x)", "", f"{s_t / f_t:.2f}x"],
        ],
    )
    print(logs)


if __name__ == "__main__":
    main()
