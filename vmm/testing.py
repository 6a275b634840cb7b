"""A conformance suite every VMM driver passes: subclass ``DriverConformance`` in a test file.

A driver's test module provides three fixtures and two capability flags::

    class TestQemu(DriverConformance):
        real_guest = True            # commands really run in a guest kernel

        @pytest.fixture(scope="class")
        def driver(self): return QemuMicrovmDriver()

        @pytest.fixture(scope="class")
        def boot_spec(self, tmp_path_factory): return lambda work_dir: guest.boot_spec(work_dir, 128)

Tests that need a real guest kernel (RNG divergence, copy-on-write accounting, guest files) are
skipped where ``real_guest`` is False, e.g. for a driver exercised against a recorded-API fake.
One VM is booted per class: it is snapshotted with ``resume=True`` and then serves the command
tests, so the whole suite costs one boot plus a few forks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vmm import process
from vmm.base import VM, BootSpec, Driver, SnapshotFiles
from vmm.errors import CompatibilityError, GuestCommandFailed, GuestCommandTimeout, RestoreFailed

_MIB = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * _MIB):
            h.update(chunk)
    return h.hexdigest()


class DriverConformance:
    """The behaviour the ``vmm.base.Driver`` contract promises, checked against a real driver."""

    #: True when guest commands run in a real guest kernel (not a recorded-API fake)
    real_guest: bool = True

    @pytest.fixture(scope="class")
    def driver(self) -> Driver:
        raise NotImplementedError("the driver's test class provides the `driver` fixture")

    @pytest.fixture(scope="class")
    def boot_spec(self) -> Callable[[Path], BootSpec]:
        raise NotImplementedError("the driver's test class provides the `boot_spec` fixture")

    @pytest.fixture(scope="class")
    def booted(
        self, driver: Driver, boot_spec: Callable[[Path], BootSpec], tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[tuple[VM, SnapshotFiles]]:
        """One booted VM and a snapshot taken from it with ``resume=True``."""
        root = tmp_path_factory.mktemp("conformance")
        vm = driver.boot(boot_spec(root / "vm"))
        try:
            if self.real_guest:
                vm.run("echo base > /tmp/written-before-snapshot", check=True)
            snap = driver.snapshot(vm, root / "snap", resume=True)
            yield vm, snap
        finally:
            vm.kill()

    @pytest.fixture
    def vm(self, booted: tuple[VM, SnapshotFiles]) -> VM:
        return booted[0]

    @pytest.fixture
    def snap(self, booted: tuple[VM, SnapshotFiles]) -> SnapshotFiles:
        return booted[1]

    # -- probing and commands --------------------------------------------------------------

    def test_available_names_accelerator_and_reason(self, driver: Driver) -> None:
        status = driver.available()
        assert status.ok, status.reason
        assert status.accel and status.reason

    def test_run_returns_output_and_exit_status(self, vm: VM) -> None:
        result = vm.run("echo out; echo err >&2; exit 3")
        assert result.exit_code == 3
        assert "out" in result.output and "err" in result.output

    def test_output_that_looks_like_a_frame_is_returned_verbatim(self, vm: VM) -> None:
        tricky = "0123456789abcdef end 0\nforkd-agent: ready"
        result = vm.run(f"printf '%s\\n' '{tricky}'; printf 'no newline'")
        assert result.ok
        assert result.output == tricky + "\nno newline"

    def test_check_raises_guest_command_failed(self, vm: VM) -> None:
        with pytest.raises(GuestCommandFailed) as info:
            vm.run("echo boom; exit 7", check=True)
        assert info.value.exit_code == 7 and "boom" in info.value.output

    def test_timeout_raises_and_agent_recovers(self, vm: VM) -> None:
        with pytest.raises(GuestCommandTimeout):
            vm.run("sleep 30", timeout=1)
        assert vm.run("echo still-here").output.strip() == "still-here"

    def test_pause_and_resume(self, vm: VM) -> None:
        vm.pause()
        vm.resume()
        assert vm.run("echo resumed").output.strip() == "resumed"

    # -- snapshots -------------------------------------------------------------------------

    def test_snapshot_writes_memory_vmstate_and_compat(self, snap: SnapshotFiles) -> None:
        assert snap.memory.stat().st_size == snap.compat.mem_mib * _MIB
        assert snap.vmstate.stat().st_size > 0
        reloaded = SnapshotFiles.load(snap.memory.parent)
        assert reloaded.compat == snap.compat
        assert snap.compat.vmm and snap.compat.vmm_version and snap.compat.accel

    def test_mismatched_snapshot_is_refused_naming_the_fields(self, driver: Driver, snap: SnapshotFiles) -> None:
        other_accel = "kvm" if snap.compat.accel != "kvm" else "tcg"
        forged = dataclasses.replace(
            snap, compat=dataclasses.replace(snap.compat, accel=other_accel, mem_mib=snap.compat.mem_mib * 2)
        )
        running = process.live_pids()
        with pytest.raises(CompatibilityError) as info:
            driver.fork(forged, 1)
        message = str(info.value)
        assert "accel" in message and other_accel in message
        assert "mem_mib" in message
        assert set(info.value.fields) == {"accel", "mem_mib"}
        assert process.live_pids() == running, "a refused fork must start nothing"

    def test_fork_rejects_wrong_disk_count(self, driver: Driver, snap: SnapshotFiles, tmp_path: Path) -> None:
        with pytest.raises(RestoreFailed):
            driver.fork(snap, 2, disks=[tmp_path / "only-one.ext4"])

    # -- forks -----------------------------------------------------------------------------

    def test_fork_children_answer_and_get_distinct_randomness(self, driver: Driver, snap: SnapshotFiles) -> None:
        children = driver.fork(snap, 3)
        try:
            assert len({c.pid for c in children}) == 3
            outputs = [
                c.run("head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'", check=True).output for c in children
            ]
            if self.real_guest:
                assert len(set(outputs)) == 3, outputs
                for c in children:
                    assert c.run("cat /tmp/written-before-snapshot").output.strip() == "base"
        finally:
            for c in children:
                c.kill()
        assert all(not c.alive for c in children)

    def test_children_never_write_the_memory_file(self, driver: Driver, snap: SnapshotFiles) -> None:
        if not self.real_guest:
            pytest.skip("needs a real guest to dirty memory")
        before = file_sha256(snap.memory)
        children = driver.fork(snap, 2)
        try:
            for c in children:
                c.run("head -c 8388608 /dev/urandom > /tmp/dirty", check=True)
            stats = [c.mem_stats() for c in children]
        finally:
            for c in children:
                c.kill()
        assert file_sha256(snap.memory) == before
        for s in stats:
            # the 8 MiB (plus what the guest touched) is private; the rest stays shared
            assert 8 * _MIB <= s.guest_ram_private_dirty < snap.compat.mem_mib * _MIB // 4
            assert s.pss > 0 and s.rss >= s.guest_ram_pss

    def test_kill_reaps_the_process(self, driver: Driver, snap: SnapshotFiles) -> None:
        child = driver.fork(snap, 1)[0]
        pid = child.pid
        child.kill()
        child.kill()  # idempotent
        assert not child.alive
        assert pid not in process.live_pids()
        assert not Path(f"/proc/{pid}").exists() or _is_not_our_child(pid)


def _is_not_our_child(pid: int) -> bool:
    """True if /proc/<pid> now belongs to an unrelated, recycled process."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().split()[3]) != os.getpid()
    except (OSError, ValueError, IndexError):
        return True
