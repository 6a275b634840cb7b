"""forkd_client.vmops with real QEMU: base snapshot, chain link, fork, refusals, keep.

One 128 MiB base is booted per module (the cached guest, built once per machine) and one link
is built on it; every other test restores or forks those.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import forkd_client.verified as verified_module
from forkd_client.errors import DependentsExist, SnapshotExists
from forkd_client.snapdir import HUB_JSON
from forkd_client.store import SnapshotStore
from forkd_client.vmmcompat import from_manifest_compat, to_manifest_compat
from forkd_client.vmops import (
    ANNOTATION_EXEC,
    VmSetupError,
    fork,
    make_driver,
    require_driver,
    snapshot_base,
    snapshot_diff,
)
from forkd_client.vmops.build import count_changed_chunks
from manifest.diff import diff_files
from vmm import CompatibilityError, FirecrackerDriver, QemuMicrovmDriver, process

from .snapshots import sha256_hex
from .vmfixtures import QEMU, needs_qemu, no_vm_left_running  # noqa: F401  (autouse)

MEM_MIB = 128


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SnapshotStore, dict]]:
    """A store with base (``/root/m1`` = one) and link on it (``/root/m2`` = two)."""
    if shutil.which(QEMU) is None:
        pytest.skip(f"{QEMU} is not installed")
    with SnapshotStore(tmp_path_factory.mktemp("vmstore")) as store:
        base = snapshot_base(store, "base", mem_mib=MEM_MIB, exec_cmd="echo one > /root/m1")
        base_hash = sha256_hex(base.snapshot.dir / "memory.bin")
        link = snapshot_diff(store, "base", "link", "echo two > /root/m2; head -c 1048576 /dev/urandom > /root/r")
        yield store, {"base": base, "link": link, "base_hash": base_hash}


@pytest.mark.parametrize("name", ["qemu", "qemu-microvm", None])
def test_driver_factory_picks_qemu_by_name_and_by_default(name: str | None) -> None:
    assert isinstance(make_driver(name), QemuMicrovmDriver)


def test_driver_factory_picks_firecracker_and_refuses_unknown_names() -> None:
    assert isinstance(make_driver("firecracker"), FirecrackerDriver)
    with pytest.raises(VmSetupError, match="unknown VMM 'bochs'"):
        make_driver("bochs")


def test_unusable_firecracker_says_what_it_needs() -> None:
    if FirecrackerDriver().available().ok:
        pytest.skip("Firecracker is usable on this host")
    with pytest.raises(VmSetupError, match=r"firecracker cannot run here: .*hardware KVM"):
        require_driver("firecracker")


@needs_qemu
def test_base_is_installed_with_the_manifest_compat_and_the_exec_annotation(built) -> None:
    store, made = built
    snap = store.get("base")
    host = to_manifest_compat(QemuMicrovmDriver().host_compat(MEM_MIB, 1, ()))
    assert {k: snap.compat[k] for k in host} == host
    assert snap.compat["kernel"] and snap.compat["kernelDigest"].startswith("sha256:")
    assert snap.annotations == {ANNOTATION_EXEC: "echo one > /root/m1"}
    assert sorted(os.listdir(snap.dir)) == [HUB_JSON, "memory.bin", "snapshot.json", "vmstate"]
    assert snap.parent_tag is None and snap.files["memory.bin"].size == MEM_MIB << 20
    assert made["base"].exec_result.ok and made["base"].timings_ms["boot_ms"] > 0
    assert os.listdir(store.staging_root) == []


@needs_qemu
def test_link_records_its_parent_and_only_its_clone_was_written(built) -> None:
    store, made = built
    base, link = store.get("base"), store.get("link")
    assert sha256_hex(base.dir / "memory.bin") == made["base_hash"], "the parent's stored memory must be untouched"
    assert link.parent_tag == "base" and link.parent_content_hash == made["base_hash"]
    assert link.compat == base.compat
    assert link.annotations[ANNOTATION_EXEC].startswith("echo two")
    diff = made["link"].diff
    assert diff.changed_chunks == sum(1 for _ in diff_files(base.dir / "memory.bin", link.dir / "memory.bin"))
    assert 16 <= diff.changed_chunks < diff.total_chunks == (MEM_MIB << 20) // 65536  # 1 MiB of random data
    assert store.verify_chain("link")[-1].tag == "link"


@needs_qemu
def test_fork_verifies_the_chain_without_hashing_and_children_see_every_link(built, monkeypatch) -> None:
    store, _ = built
    store.verify_chain("link")  # whatever was still racy is re-recorded now
    hashed: list[str] = []
    real = verified_module.digest_file
    monkeypatch.setattr(verified_module, "digest_file", lambda path, algs: hashed.append(str(path)) or real(path, algs))
    with fork(store, "link", 2) as forked:
        assert hashed == [], "a verified chain must not be hashed again at spawn"
        assert forked.chain == ["base", "link"] and forked.verify_ms >= 0
        forked.run("cat /root/m1 /root/m2", timeout=30)
        forked.measure()
        for child in forked.children:
            assert child.result.output == "one\ntwo\n" and not child.failed
            assert 0 < child.memory.guest_ram_private_dirty < (MEM_MIB << 20) // 4
            assert child.ready_ms > 0 and child.exec_ms > 0
    assert all(not c.vm.alive for c in forked.children)


@needs_qemu
def test_snapshot_diff_refuses_a_parent_recorded_under_another_configuration(built) -> None:
    store, _ = built
    store.tag("base", "forged-base")
    meta_path = store.path("forged-base") / HUB_JSON
    meta = json.loads(meta_path.read_text())
    other = "kvm" if meta["compat"]["accel"] == "tcg" else "tcg"
    meta["compat"]["accel"] = other
    meta_path.write_text(json.dumps(meta))
    try:
        with pytest.raises(CompatibilityError, match=f"accel: recorded '{other}'") as info:
            snapshot_diff(store, "forged-base", "never", "true")
        assert set(info.value.fields) == {"accel"}
        assert not store.exists("never") and os.listdir(store.staging_root) == []
    finally:
        store.remove("forged-base")


@needs_qemu
def test_existing_tags_are_refused_before_anything_starts(built) -> None:
    store, _ = built
    with pytest.raises(SnapshotExists):
        snapshot_base(store, "link", mem_mib=MEM_MIB)
    with pytest.raises(DependentsExist, match="link"):
        snapshot_base(store, "base", mem_mib=MEM_MIB, force=True)
    with pytest.raises(SnapshotExists):
        snapshot_diff(store, "base", "link", "true")


@needs_qemu
def test_detached_children_outlive_the_reaper(built) -> None:
    store, _ = built
    forked = fork(store, "link", 1)
    child = forked.children[0].vm
    try:
        forked.detach()
        assert forked.kept and child.alive
        assert child.pid not in process.live_pids(), "vmm's exit-time reaper would kill a kept child"
        with forked:
            pass  # leaving the context does not kill kept children
        assert child.alive
    finally:
        child.kill()  # stops and reaps it even though the reaper no longer tracks it
    assert not child.alive and not Path(child.work_dir).exists()


@needs_qemu
def test_compat_round_trips_through_the_store(built) -> None:
    store, made = built
    stored = from_manifest_compat(store.get("base").compat)
    assert dataclasses.replace(stored, kernel_release=None, kernel_digest=None) == QemuMicrovmDriver().host_compat(
        MEM_MIB, 1, ()
    )
    assert (
        count_changed_chunks(store.path("base") / "memory.bin", store.path("link") / "memory.bin") == made["link"].diff
    )
