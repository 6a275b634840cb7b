"""``forkd fork REF --lazy`` of a chain with a root filesystem, end to end: a real hub process,
real QEMU children booted from a tiny ext4 image (static busybox as /bin/sh), the forkd CLI.

The base is baked from the image (``snapshot_rootfs``) and writes ``/srv/app/m1``; the link
(``snapshot_diff``) writes ``/srv/app/m2``. Each bake syncs and drops the guest's page cache
before its snapshot, so a child reads those files, and the image's own ``/etc/marker``, from its
disk: the head's ``rootfs.ext4``, served lazily through the mount like the memory image.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from forkd_client.hub.client import HubClient
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore
from forkd_client.vmops import GuestSteps, snapshot_diff, snapshot_rootfs
from manifest import mediatypes as mt
from manifest.model import ChunkMap, LayerManifest
from tests.e2e.hubproc import HubProcess
from tests.vmm.test_qemu_rootfs import make_rootfs

from ..vmfixtures import needs_qemu, no_vm_left_running  # noqa: F401  (autouse)
from .lazycli import gone, login, run_forkd, user_env, wait_until

MEM_MIB = 128
REF = "acme/disk:v1"
#: written to the disk and dropped from the guest's page cache: a child reads it from the disk
WRITE_AND_FORGET = "echo {text} > /srv/app/{name} && sync && echo 3 > /proc/sys/vm/drop_caches"
READ_ALL = "cat /etc/marker /srv/app/m1 /srv/app/m2"
SEEN = ["from", "the", "image", "one", "two"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding base (the image, ``/srv/app/m1`` = one) and link on it (``/srv/app/m2`` = two)."""
    root = tmp_path_factory.mktemp("lazy-disk-src")
    image = make_rootfs(root / "root.ext4")
    with SnapshotStore(root / "store") as store:
        steps = GuestSteps.of(WRITE_AND_FORGET.format(text="one", name="m1"))
        snapshot_rootfs(store, "base", image, mem_mib=MEM_MIB, steps=steps)
        snapshot_diff(store, "base", "link", WRITE_AND_FORGET.format(text="two", name="m2"))
    return root / "store"


def _push(built: Path, root: Path, hub: HubProcess) -> None:
    env = {**user_env(root, hub), "FORKD_HOME": str(built)}
    login(env, hub, "ci", "push:acme/*")
    pushed = run_forkd(env, "push", "link", REF, "--json")
    assert pushed.returncode == 0, pushed.stderr


def _user(root: Path, hub: HubProcess, name: str) -> dict[str, str]:
    env = user_env(root / name, hub)
    login(env, hub, name, "pull:acme/*")
    return env


def _same_chain(lazy_home: Path, plain_home: Path, tag: str) -> None:
    """The chain a lazy fork installed is the one ``forkd pull`` installs: same bytes, same records."""
    with SnapshotStore(lazy_home) as lazy, SnapshotStore(plain_home) as plain:
        assert [s.tag for s in lazy.chain(tag)] == [s.tag for s in plain.chain(tag)]
        for a, b in zip(lazy.chain(tag), plain.chain(tag), strict=True):
            for role in (mt.MEMORY_FILE, mt.VMSTATE_FILE, mt.ROOTFS_FILE):
                assert (a.dir / role).read_bytes() == (b.dir / role).read_bytes(), (a.tag, role)
            tree = lazy.verified.cached_tree(a.dir / mt.ROOTFS_FILE)
            assert tree is not None and tree == plain.verified.cached_tree(b.dir / mt.ROOTFS_FILE)
            assert a.origin == b.origin and a.compat == b.compat


@needs_qemu
def test_lazy_children_read_both_layers_files_from_the_served_disk_and_the_install_is_a_pulls(
    built, hub, tmp_path, loopback_server
):
    _push(built, tmp_path, hub)
    bob = _user(tmp_path, hub, "bob")
    # --net passes through: the children reach a server on the host's loopback through the NAT
    fetch = f"printf 'GET /hello.txt HTTP/1.0\\r\\n\\r\\n' | nc -w 5 10.0.2.2 {loopback_server} | tail -n 1"
    command = f"{READ_ALL} && {fetch}"
    run = run_forkd(bob, "fork", REF, "--lazy", "--as", "disk", "-n", "2", "--net", "--exec", command, "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert [c["output"].split() for c in out["children"]] == [[*SEEN, "hello", "from", "the", "host"]] * 2
    disk = out["rootfs_before_fill"]
    assert 0 < disk["chunks_fetched"] < disk["chunks"]  # read from the served disk, not all of it
    assert out["failed_chunks"] == [] and out["installed"]["digest"] == out["digest"]
    # a child's writes go to its own overlay; the served file is never written
    again = run_forkd(bob, "fork", "disk", "--exec", "echo new > /srv/app/m3 && cat /srv/app/m3 /srv/app/m2", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["children"][0]["output"].split() == ["new", "two"]

    carol = _user(tmp_path, hub, "carol")
    assert run_forkd(carol, "pull", REF, "--as", "disk").returncode == 0
    _same_chain(tmp_path / "bob" / "home", tmp_path / "carol" / "home", "disk")
    assert (tmp_path / "bob" / "home" / "snapshots" / "disk" / mt.ROOTFS_FILE).read_bytes() == (
        built / "snapshots" / "link" / mt.ROOTFS_FILE
    ).read_bytes()


def _link_disk_frames(hub: HubProcess) -> list[bytes]:
    """The zstd frames of the disk chunks the link changed, as the hub serves them."""
    with HubClient(hub.url, hub.token("peek", "pull:acme/*")) as client:
        ref = Reference.parse(REF)
        repo = client.repository(ref.name)
        head = repo.get_chain(ref.tag or "")[-1]
        manifest = LayerManifest.from_json(head.manifest)
        desc = manifest.chunk_maps[mt.ROOTFS_FILE]
        chunk_map = ChunkMap.from_json(repo.get_blob(desc.digest, desc.size))
        frames: list[bytes] = []
        for entry in chunk_map.entries:
            if entry.digest is not None:
                assert entry.blob is not None and entry.offset is not None and entry.length is not None
                blob = chunk_map.blobs[entry.blob]
                frames.append(bytes(repo.read_ranges(blob, [(entry.offset, entry.length)])[0]))
    return frames


@needs_qemu
def test_a_disk_chunk_corrupted_on_the_hub_is_refused_named_and_nothing_is_installed(built, hub, tmp_path):
    _push(built, tmp_path, hub)
    frames = _link_disk_frames(hub)
    assert frames
    packs = [p for p in hub.data_dir.rglob("*") if p.is_file() and "packs" in p.parts]
    hit = 0
    for pack in packs:  # each of the link's disk frames gets one byte flipped where the hub stores it
        raw = bytearray(pack.read_bytes())
        for frame in frames:
            at = raw.find(frame)
            if at >= 0:
                raw[at + len(frame) // 2] ^= 0xFF
                hit += 1
        pack.write_bytes(bytes(raw))
    assert hit == len(frames)
    bob = _user(tmp_path, hub, "bob")
    run = run_forkd(bob, "fork", REF, "--lazy", "-n", "1", "--exec", "cat /srv/app/m2")
    assert run.returncode == 6, (run.stdout, run.stderr)
    assert "forkd: error: layer sha256:" in run.stderr
    assert "rootfs.ext4 chunk " in run.stderr and "is corrupt" in run.stderr
    assert json.loads(run_forkd(bob, "images", "--json").stdout) == []


@needs_qemu
def test_kept_lazy_children_of_a_disk_chain_outlive_the_cli_and_the_server_installs_the_disk(built, hub, tmp_path):
    _push(built, tmp_path, hub)
    bob = _user(tmp_path, hub, "bob")
    run = run_forkd(bob, "fork", REF, "--lazy", "--keep", "--as", "disk", "--exec", READ_ALL, "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    child, server = out["children"][0]["pid"], out["server"]["pid"]
    assert out["children"][0]["output"].split() == SEEN and out["kept"]
    result = Path(out["server"]["control"]) / "result.json"
    wait_until(result.exists)  # filled and installed while the child still runs
    assert json.loads(result.read_text())["installed"]["tag"] == "disk"
    assert not gone(server)  # the child's QEMU still holds its disk and memory open
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: gone(server), timeout=30)
    assert not os.path.ismount(Path(out["memory_file"]).parent)
    carol = _user(tmp_path, hub, "carol")
    assert run_forkd(carol, "pull", REF, "--as", "disk").returncode == 0
    _same_chain(tmp_path / "bob" / "home", tmp_path / "carol" / "home", "disk")


@needs_qemu
def test_pull_lazy_mounts_the_disk_too_and_installs_it_in_the_background(built, hub, tmp_path):
    _push(built, tmp_path, hub)
    bob = _user(tmp_path, hub, "bob")
    run = run_forkd(bob, "pull", REF, "--lazy", "--as", "disk", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    want = (built / "snapshots" / "link" / mt.ROOTFS_FILE).read_bytes()
    assert Path(out["rootfs"]) == Path(out["memory"]).parent / mt.ROOTFS_FILE
    assert Path(out["rootfs"]).read_bytes() == want  # readable through the mount, fetched as read
    wait_until(lambda: gone(out["server"]["pid"]))
    assert not Path(out["server"]["control"]).exists()  # installed: the server removed its control directory
    assert (tmp_path / "bob" / "home" / "snapshots" / "disk" / mt.ROOTFS_FILE).read_bytes() == want
    carol = _user(tmp_path, hub, "carol")
    assert run_forkd(carol, "pull", REF, "--as", "disk").returncode == 0
    _same_chain(tmp_path / "bob" / "home", tmp_path / "carol" / "home", "disk")


@needs_qemu
def test_a_profile_recorded_at_push_covers_the_disk_and_the_first_lazy_fork_fetches_it_first(built, hub, tmp_path):
    env = {**user_env(tmp_path / "alice", hub), "FORKD_HOME": str(built)}
    login(env, hub, "ci", "push:acme/*")
    pushed = run_forkd(env, "push", "link", REF, "--record-profile", "--profile-exec", READ_ALL, "--json")
    assert pushed.returncode == 0, pushed.stderr
    profile = json.loads(pushed.stdout)["profile"]
    assert profile["chunks"] > 0 and profile["rootfs_chunks"] > 0 and profile["exec"] == READ_ALL

    bob = _user(tmp_path, hub, "bob")
    run = run_forkd(bob, "fork", REF, "--lazy", "-n", "1", "--exec", READ_ALL, "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["children"][0]["output"].split() == SEEN
    assert out["profile"]["used"] == f"access profile {profile['digest']} (memory.bin, rootfs.ext4)"
    # the disk's working set was fetched before the child ran: it read (nearly) nothing else
    assert out["rootfs_before_fill"]["chunks_fetched"] <= profile["rootfs_chunks"] + 64
