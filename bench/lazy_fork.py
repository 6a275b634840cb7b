"""Lazy fork vs pull-then-fork: time to the first child's answer, and bytes fetched before it.

    python bench/lazy_fork.py [--mem-mib 1536] [--fill-mib 1024] [--mbit 1000] [--dir DIR]

Makes one real QEMU (TCG) base snapshot whose memory holds ``--fill-mib`` MiB of random data
(the guest fills a tmpfs file from /dev/urandom before the snapshot; the child never reads it),
pushes it to a real ``forkd-hub serve`` process, then, in the same run, over loopback and over
loopback shaped to ``--mbit`` Mbit/s (bench/netshape.py), from a fresh store each time:

* **pull-then-fork**: ``pull`` (every chunk fetched and verified, the snapshot installed), then
  ``vmops.fork`` one child and run ``echo ok`` in it;
* **lazy**: ``lazy.fork.lazy_fork`` (chain resolved and verified, the head's image mounted
  through FUSE, chunks fetched as the child's page faults ask for them), one child, ``echo ok``;
  its page-access profile is then saved on the hub (``--save-profile``);
* **lazy, profile first**: the same from a fresh store, now with that profile: the working set is
  fetched as soon as the image is mounted, and the child runs once it is local;
* **lazy, profile from the push**: the same head pushed to another repository with a profile
  recorded at push (``forkd push --record-profile``: one local child run through a recording
  mount), so this is that repository's *first* lazy fork.

Time is from the call to the child's answer; bytes are what the hub client received until then
(manifests, chunk maps, vmstate and chunk frames). Prints both, and the ratios the issue's goal
names: lazy time / pull-then-fork time (goal <= 25%) and lazy bytes / the chain's bytes (a full
pull's bytes, goal <= 20%).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import human, print_table  # noqa: E402
from netshape import shaped_loopback  # noqa: E402
from procs import HubServer  # noqa: E402

from forkd_client.hub.client import HubClient  # noqa: E402
from forkd_client.hub.pull import pull  # noqa: E402
from forkd_client.hub.push import push  # noqa: E402
from forkd_client.hub.reference import Reference  # noqa: E402
from forkd_client.lazy.fork import lazy_fork  # noqa: E402
from forkd_client.lazy.profile import attach_profile  # noqa: E402
from forkd_client.lazy.record import record_profile  # noqa: E402
from forkd_client.store import SnapshotStore  # noqa: E402
from forkd_client.vmops import fork, snapshot_base  # noqa: E402
from manifest.chunking import DEFAULT_CHUNK_SIZE  # noqa: E402

#: one repository per network, so the profile saved on one does not serve the other's first lazy run
REFS = {"loopback": Reference.parse("bench/loopback:v1"), "shaped": Reference.parse("bench/shaped:v1")}
#: the same head pushed with a profile recorded at push (``forkd push --record-profile``)
RECORDED = {"loopback": Reference.parse("bench/loopback-rec:v1"), "shaped": Reference.parse("bench/shaped-rec:v1")}


def fill_command(fill_mib: int) -> str:
    return (
        f"mkdir -p /mnt/fill && mount -t tmpfs -o size={fill_mib + 64}m tmpfs /mnt/fill && "
        f"head -c {fill_mib << 20} /dev/urandom > /mnt/fill/data && echo filled"
    )


def pull_then_fork(root: Path, url: str, token: str, ref: Reference) -> tuple[float, int, str]:
    with SnapshotStore(root) as store, HubClient(url, token) as client:
        started = time.perf_counter()
        pull(store, client, ref, as_tag="big")
        with fork(store, "big", 1) as forked:
            forked.run("echo ok", 600)
            seconds = time.perf_counter() - started
            answer = forked.children[0].result.output.strip() if forked.children[0].result else "-"
        return seconds, client.bytes_received, answer


def lazy(root: Path, url: str, token: str, ref: Reference, *, save: bool) -> tuple[float, int, str, dict[str, int]]:
    with SnapshotStore(root) as store, HubClient(url, token) as client:
        started = time.perf_counter()
        done = lazy_fork(store, client, ref, 1, as_tag="big")
        with done.session:
            try:
                done.forked.run("echo ok", 600)
                seconds = time.perf_counter() - started
                received = client.bytes_received
                child = done.forked.children[0]
                answer = child.result.output.strip() if child.result else f"error: {child.error}"
            finally:
                done.forked.kill()
            stats = done.snapshot_stats()
            if save:
                done.session.save_profile()
            return seconds, received, answer, stats


def one_network(
    label: str, root: Path, url: str, token: str, ref: Reference, recorded: Reference
) -> list[list[object]]:
    full_s, full_bytes, full_answer = pull_then_fork(root / f"{label}-pull", url, token, ref)
    rows: list[list[object]] = [[label, "pull-then-fork", f"{full_s:.2f} s", human(full_bytes), "", ""]]
    paths = (("lazy", ref, True), ("lazy, profile first", ref, False), ("lazy, profile from the push", recorded, False))
    for k, (path, which, save) in enumerate(paths):
        lazy_s, lazy_bytes, answer, stats = lazy(root / f"{label}-{k}", url, token, which, save=save)
        print(
            f"[{label}] {path}: answered {answer!r} after {stats['chunks_fetched']} of {stats['chunks']} chunks "
            f"were fetched (pull-then-fork answered {full_answer!r})"
        )
        rows.append(
            [
                label,
                path,
                f"{lazy_s:.2f} s",
                human(lazy_bytes),
                f"{100 * lazy_s / full_s:.1f}%",
                f"{100 * lazy_bytes / full_bytes:.1f}%",
            ]
        )
    for d in root.glob(f"{label}-*"):
        shutil.rmtree(d, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mem-mib", type=int, default=1536, help="guest RAM (default 1536)")
    parser.add_argument("--fill-mib", type=int, default=1024, help="random data in the guest's tmpfs (default 1024)")
    parser.add_argument("--mbit", type=int, default=1000, help="the shaped link's rate (default 1000 Mbit/s)")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lazy-bench-", dir=args.dir))
    try:
        started = time.perf_counter()
        with SnapshotStore(root / "src") as store:
            snapshot_base(store, "big", mem_mib=args.mem_mib, exec_cmd=fill_command(args.fill_mib), exec_timeout=1800)
            built = time.perf_counter() - started
            with HubServer(root / "hub", root / "hub.log") as hub:
                token = hub.token("bench", "push:bench/*")
                with HubClient(hub.url, token) as client:
                    for ref in REFS.values():
                        push(store, client, "big", ref)
                    recorded_s = time.perf_counter()
                    memory = record_profile(store, "big", DEFAULT_CHUNK_SIZE)[0]  # forkd push --record-profile
                    profile = memory.chunks
                    recorded_s = time.perf_counter() - recorded_s
                    for ref in RECORDED.values():
                        head = push(store, client, "big", ref).digest
                        manifest, _ = client.repository(ref.name).get_manifest(head)
                        attach_profile(client.repository(ref.name), head, len(manifest), DEFAULT_CHUNK_SIZE, profile)
                print(
                    f"guest {args.mem_mib} MiB with {args.fill_mib} MiB of random data in tmpfs; built in {built:.0f} s; "
                    f"load average {os.getloadavg()[0]:.1f}; push's profile: {len(profile)} chunks recorded "
                    f"in {recorded_s:.2f} s"
                )
                rows = one_network("loopback", root, hub.url, token, REFS["loopback"], RECORDED["loopback"])
                with shaped_loopback(args.mbit) as why:
                    if why is None:
                        rows += one_network(
                            f"{args.mbit} Mbit/s", root, hub.url, token, REFS["shaped"], RECORDED["shaped"]
                        )
                    else:
                        print(f"shaped run skipped: {why}")
        print_table(
            ["network", "path", "first answer", "bytes before it", "time vs pull", "bytes vs pull"],
            rows,
            title="time to the first child's answer (echo ok) and bytes received before it; goal: lazy <= 25% "
            "of the time with <= 20% of the bytes",
        )
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
