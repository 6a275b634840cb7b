"""Real QEMU microvm tests: the conformance suite plus chain links, disks and failure paths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from manifest.fileops import clone_file
from vmm import process
from vmm.base import BootSpec, SnapshotFiles
from vmm.errors import BootFailed, RestoreFailed
from vmm.guest import GuestImage
from vmm.qemu import QemuMicrovmDriver
from vmm.testing import DriverConformance, file_sha256

pytestmark = [pytest.mark.qemu, pytest.mark.slow]
MEM_MIB = 128


@pytest.fixture(scope="module")
def qemu(guest: GuestImage) -> QemuMicrovmDriver:
    driver = QemuMicrovmDriver()
    status = driver.available()
    if not status.ok:
        pytest.skip(f"QEMU unusable: {status.reason}")
    return driver


class TestQemuConformance(DriverConformance):
    real_guest = True

    @pytest.fixture(scope="class")
    def driver(self, qemu: QemuMicrovmDriver) -> QemuMicrovmDriver:
        return qemu

    @pytest.fixture(scope="class")
    def boot_spec(self, guest: GuestImage) -> Callable[[Path], BootSpec]:
        return lambda work_dir: guest.boot_spec(work_dir, mem_mib=MEM_MIB)


def test_chain_link_children_see_the_links_writes(qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path) -> None:
    """base (with a disk) → link built on a clone of base memory → 2 children of the link."""
    disk = tmp_path / "disk.ext4"
    clone_file(guest.rootfs, disk)
    vm = qemu.boot(guest.boot_spec(tmp_path / "base", mem_mib=MEM_MIB, rootfs=disk))
    base = qemu.snapshot(vm, tmp_path / "base")
    assert not vm.alive, "a snapshot without resume consumes the VM"
    assert base.rootfs is not None and base.compat.device_ids == ("rootfs",)
    base_hash = file_sha256(base.memory)

    link_dir = tmp_path / "l2"
    link_dir.mkdir()
    clone_file(base.memory, link_dir / "memory.bin")
    link_vm = qemu.restore_writable(base, link_dir / "memory.bin", link_dir)
    link_vm.run("echo layer-two > /tmp/marker && echo on-disk > /mnt/disk-marker && sync", check=True)
    link = qemu.snapshot(link_vm, link_dir)

    assert file_sha256(base.memory) == base_hash, "the link must write only into its clone"
    assert file_sha256(link.memory) != base_hash
    assert SnapshotFiles.load(link_dir).compat == base.compat

    children = qemu.fork(link, 2)
    try:
        for child in children:
            assert child.run("cat /tmp/marker", check=True).output == "layer-two\n"
            assert child.run("cat /mnt/disk-marker", check=True).output == "on-disk\n"
        # each child got its own disk copy: a write in one is invisible to the other
        children[0].run("echo mine > /mnt/only-child-0 && sync", check=True)
        assert not children[1].run("test -e /mnt/only-child-0").ok
    finally:
        for child in children:
            child.kill()


def test_restore_writable_refuses_the_stored_memory_file(
    qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path
) -> None:
    fake = _fake_snapshot(qemu, tmp_path)
    with pytest.raises(RestoreFailed, match="clone"):
        qemu.restore_writable(fake, fake.memory, tmp_path / "w")


def test_boot_refuses_a_work_dir_that_holds_memory(qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path) -> None:
    (tmp_path / "memory.bin").write_bytes(b"precious")
    with pytest.raises(BootFailed, match="already exists"):
        qemu.boot(guest.boot_spec(tmp_path, mem_mib=MEM_MIB))
    assert (tmp_path / "memory.bin").read_bytes() == b"precious"


def test_boot_failure_reports_qemu_log(qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-kernel"
    bogus.write_bytes(b"\0" * 4096)
    spec = BootSpec(
        kernel=bogus,
        initrd=guest.initrd,
        cmdline=guest.cmdline,
        work_dir=tmp_path / "vm",
        mem_mib=MEM_MIB,
        boot_timeout=20,
    )
    with pytest.raises(BootFailed) as info:
        qemu.boot(spec)
    assert "qemu.log" in str(info.value)
    assert process.live_pids() == []


def test_fork_without_work_dir_cleans_up_its_temp_dirs(
    qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path
) -> None:
    vm = qemu.boot(guest.boot_spec(tmp_path / "base", mem_mib=MEM_MIB))
    snap = qemu.snapshot(vm, tmp_path / "base")
    child = qemu.fork(snap, 1)[0]
    child_dir = child.work_dir
    assert child_dir.is_dir() and not str(child_dir).startswith(str(tmp_path))
    child.kill()
    assert not child_dir.exists()


def _fake_snapshot(qemu: QemuMicrovmDriver, tmp_path: Path) -> SnapshotFiles:
    """A snapshot record with this host's compat and placeholder files (enough for refusals)."""
    memory, vmstate = tmp_path / "memory.bin", tmp_path / "vmstate"
    with open(memory, "wb") as f:
        f.truncate(MEM_MIB << 20)
    vmstate.write_bytes(b"x")
    return SnapshotFiles(memory, vmstate, qemu.host_compat(MEM_MIB, 1, ()))


def test_a_failed_restore_leaves_nothing_running(qemu: QemuMicrovmDriver, tmp_path: Path) -> None:
    fake = _fake_snapshot(qemu, tmp_path)  # compat matches, but the vmstate is garbage
    with pytest.raises(RestoreFailed, match="restore of"):
        qemu.fork(fake, 2, work_dir=tmp_path / "kids")
    assert process.live_pids() == []
    assert fake.memory.stat().st_size == MEM_MIB << 20


def test_children_started_before_their_vmstate_exists_restore_it(
    qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path
) -> None:
    """start_fork starts the processes before the vmstate is there (a lazy fork fetches it
    meanwhile); finish restores the state written afterwards: the child sees the base's file."""
    vm = qemu.boot(guest.boot_spec(tmp_path / "base", mem_mib=MEM_MIB))
    vm.run("echo started-early > /root/marker", check=True)
    snap = qemu.snapshot(vm, tmp_path / "base")
    late = tmp_path / "late"
    late.mkdir()
    early = SnapshotFiles(snap.memory, late / "vmstate", snap.compat)
    before = set(process.live_pids())
    started = qemu.start_fork(early, 2, work_dir=tmp_path / "kids")
    assert len(set(process.live_pids()) - before) == 2 and not early.vmstate.exists()  # nothing to restore yet
    clone_file(snap.vmstate, early.vmstate)
    children = started.finish()
    try:
        assert [c.run("cat /root/marker").output.strip() for c in children] == ["started-early"] * 2
    finally:
        for child in children:
            child.kill()
    assert set(process.live_pids()) <= before


def test_a_cancelled_start_leaves_nothing_running(qemu: QemuMicrovmDriver, tmp_path: Path) -> None:
    fake = _fake_snapshot(qemu, tmp_path)
    started = qemu.start_fork(fake, 2)
    assert len(process.live_pids()) == 2
    started.cancel()
    started.cancel()  # idempotent
    assert process.live_pids() == []
