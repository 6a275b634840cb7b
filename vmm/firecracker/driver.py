"""``FirecrackerDriver``: the driver contract over Firecracker's API socket (KVM hosts only).

Process model: one ``firecracker --api-sock api.sock`` per VM, started in the VM's work dir; the
serial console is the process's stdin/stdout, where the forkd guest agent answers.

* boot: ``PUT /machine-config`` → ``PUT /boot-source`` → ``PUT /drives/rootfs`` (if a disk) →
  ``PUT /actions {InstanceStart}`` → agent hello. RAM is anonymous until the first snapshot.
* snapshot: ``PATCH /vm {Paused}`` → ``PUT /snapshot/create {Full}`` writing ``memory.bin`` and
  ``vmstate`` → kill (or ``PATCH /vm {Resumed}`` with ``resume=True``).
* fork: per child a new process → ``PUT /snapshot/load`` with ``mem_backend {File}`` (Firecracker
  maps it ``MAP_PRIVATE``: copy-on-write, the file is never written) and ``resume_vm: false`` →
  ``PATCH /drives/rootfs`` to the child's own disk → ``PATCH /vm {Resumed}`` → reseed.
* restore_writable: Firecracker has no shared-file mode, so a chain link loads the caller's clone
  privately with dirty-page tracking, takes a ``Diff`` snapshot (only the dirty pages, sparse)
  and merges those pages into the clone, which becomes the link's ``memory.bin``.

Firecracker wants an uncompressed ELF ``vmlinux`` with virtio-mmio built in; the Debian cloud
kernel the QEMU tests boot is neither, so this driver is exercised here against a recorded-API
fake (``tests/vmm/fake_firecracker.py``) and runs for real only on KVM hosts.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path

from manifest.fileops import clone_file
from vmm import process
from vmm.base import (
    MEMORY_FILE,
    NIC_DEVICE,
    ROOTFS_DEVICE,
    VM,
    VMSTATE_FILE,
    Availability,
    BootSpec,
    CompatInfo,
    Driver,
    SnapshotFiles,
    check_compat,
)
from vmm.errors import BootFailed, CompatibilityError, RestoreFailed, SnapshotFailed, VmmError, VmmUnavailable
from vmm.files import merge_sparse, move_file
from vmm.firecracker.api import FirecrackerApi
from vmm.firecracker.vm import API_SOCKET, FIRECRACKER_LOG, FirecrackerVM
from vmm.kvm import kvm_problem

_TIMEOUT = 30.0
_NO_NIC = (
    "the Firecracker driver attaches no network device (Firecracker needs a host tap device for one); "
    "snapshots with a NIC (from forkd from-image / from-debian) run on --vmm qemu"
)


class FirecrackerDriver(Driver):
    """Firecracker microVMs. ``require_kvm=False`` only for tests against a fake binary."""

    name = "firecracker"
    machine = "firecracker"

    def __init__(self, binary: str = "firecracker", require_kvm: bool = True) -> None:
        self.binary = binary
        self.require_kvm = require_kvm

    # -- probing ---------------------------------------------------------------------------

    def version(self) -> str:
        """``firecracker --version`` as ``"1.7.0"``. Raises ``VmmUnavailable``."""
        return process.binary_version(self.binary, r"v?(\d+\.\d+\.\d+)").group(1)

    def available(self) -> Availability:
        try:
            version = self.version()
        except VmmUnavailable as exc:
            return Availability(False, None, str(exc))
        problem = kvm_problem() if self.require_kvm else None
        if problem:
            return Availability(False, None, f"Firecracker needs hardware KVM: {problem}")
        return Availability(True, "kvm", f"firecracker {version}")

    def host_compat(self, mem_mib: float, vcpus: int, device_ids: tuple[str, ...]) -> CompatInfo:
        """The compat record this host would give such a VM. Raises ``VmmUnavailable``."""
        status = self.available()
        if not status.ok:
            raise VmmUnavailable(f"{self.name} unavailable: {status.reason}")
        return CompatInfo(
            vmm=self.name,
            vmm_version=self.version(),
            machine=self.machine,
            accel="kvm",
            arch=platform.machine(),
            cpu_model="host",
            vcpus=vcpus,
            mem_mib=mem_mib,
            device_ids=device_ids,
        )

    def check_restorable(self, snap: SnapshotFiles) -> None:
        if NIC_DEVICE in snap.compat.device_ids:
            raise CompatibilityError(_NO_NIC, {"device_ids": (snap.compat.device_ids, (ROOTFS_DEVICE,))})
        recorded = snap.compat
        check_compat(recorded, self.host_compat(self._memory_mib(snap), recorded.vcpus, recorded.device_ids))

    # -- boot / snapshot -------------------------------------------------------------------

    def boot(self, spec: BootSpec) -> FirecrackerVM:
        if spec.nic or spec.network:
            raise BootFailed(_NO_NIC)
        device_ids = (ROOTFS_DEVICE,) if spec.rootfs else ()
        compat = self.host_compat(spec.mem_mib, spec.vcpus, device_ids)
        work_dir = Path(spec.work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        vm = self._start(work_dir, compat, spec.rootfs, owns=False, error=BootFailed)
        try:
            vm.api.put(
                "/machine-config", {"vcpu_count": spec.vcpus, "mem_size_mib": spec.mem_mib, "track_dirty_pages": False}
            )
            boot_source = {"kernel_image_path": str(spec.kernel), "boot_args": spec.cmdline}
            if spec.initrd:
                boot_source["initrd_path"] = str(spec.initrd)
            vm.api.put("/boot-source", boot_source)
            if spec.rootfs:
                vm.api.put("/drives/rootfs", _drive(spec.rootfs))
            vm.api.put("/actions", {"action_type": "InstanceStart"})
            release = vm.agent.hello(spec.boot_timeout)
        except VmmError as exc:
            detail = vm.diagnostics()
            vm.kill()
            raise BootFailed(f"Firecracker VM did not come up: {exc}\n{detail}") from exc
        vm.compat = CompatInfo(**{**compat.to_dict(), "device_ids": device_ids, "kernel_release": release})
        return vm

    def snapshot(self, vm: VM, out_dir: Path, *, resume: bool = False) -> SnapshotFiles:
        if not isinstance(vm, FirecrackerVM) or not vm.alive:
            raise SnapshotFailed(f"{vm!r} is not a running Firecracker VM")
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        memory, vmstate = out_dir / MEMORY_FILE, out_dir / VMSTATE_FILE
        partial_state = out_dir / (VMSTATE_FILE + ".partial")
        partial_mem = out_dir / (MEMORY_FILE + ".partial")
        try:
            vm.pause()
            if vm.writable_memory is None:
                vm.api.put(
                    "/snapshot/create",
                    {"snapshot_type": "Full", "snapshot_path": str(partial_state), "mem_file_path": str(partial_mem)},
                )
                os.replace(partial_mem, memory)
            else:  # a chain link: apply the dirty pages to the caller's clone of the parent
                diff = out_dir / "memory.diff.partial"
                vm.api.put(
                    "/snapshot/create",
                    {"snapshot_type": "Diff", "snapshot_path": str(partial_state), "mem_file_path": str(diff)},
                )
                merge_sparse(diff, vm.writable_memory)
                diff.unlink()
                if not (memory.exists() and os.path.samefile(memory, vm.writable_memory)):
                    if resume:
                        clone_file(vm.writable_memory, memory, replace=True)
                    else:
                        move_file(vm.writable_memory, memory)
            os.replace(partial_state, vmstate)
            if resume:
                rootfs = self._save_disk(vm, out_dir, keep_running=True)
                vm.resume()
            else:
                vm.kill()
                rootfs = self._save_disk(vm, out_dir, keep_running=False)
        except (VmmError, OSError) as exc:
            for leftover in (partial_state, partial_mem):
                leftover.unlink(missing_ok=True)
            raise SnapshotFailed(f"snapshot of {vm!r} failed: {exc}") from exc
        snap = SnapshotFiles(memory=memory, vmstate=vmstate, compat=vm.compat, rootfs=rootfs)
        snap.save_compat()
        return snap

    # -- restore ---------------------------------------------------------------------------

    def restore_writable(
        self, snap: SnapshotFiles, memory_path: Path, work_dir: Path, disk: Path | None = None, *, network: bool = False
    ) -> FirecrackerVM:
        memory_path, work_dir, disk = self._prepare_writable(
            snap, memory_path, work_dir, disk, network, "the link's pages are merged into it"
        )
        vm = self._restore(snap, memory_path, work_dir, disk, owns=False, track_dirty=True)
        vm.writable_memory = memory_path
        return vm

    def fork(
        self,
        snap: SnapshotFiles,
        n: int,
        disks: list[Path] | None = None,
        work_dir: Path | None = None,
        *,
        network: bool = False,
    ) -> list[VM]:
        self._check_fork(snap, n, disks, network)
        children: list[VM] = []
        try:
            for i in range(n):
                child_dir, owns = self._child_dir(work_dir, i, "forkd-fc-child-")
                disk = disks[i] if disks else self._child_disk(snap, child_dir)
                children.append(self._restore(snap, snap.memory, child_dir, disk, owns, track_dirty=False))
        except BaseException:
            for child in children:
                child.kill()
            raise
        return children

    # -- internals -------------------------------------------------------------------------

    def _start(
        self, work_dir: Path, compat: CompatInfo, disk: Path | None, owns: bool, error: type[VmmError]
    ) -> FirecrackerVM:
        (work_dir / API_SOCKET).unlink(missing_ok=True)
        try:
            proc = process.spawn(
                [self.binary, "--api-sock", API_SOCKET], work_dir, work_dir / FIRECRACKER_LOG, console_pipes=True
            )
        except OSError as exc:
            raise error(f"cannot start {self.binary}: {exc}") from exc
        vm = FirecrackerVM(proc, work_dir, None, compat, rootfs=disk, owns_work_dir=owns)
        vm.api = FirecrackerApi(work_dir / API_SOCKET, _TIMEOUT, lambda: vm.alive)
        return vm

    def _restore(
        self, snap: SnapshotFiles, memory: Path, work_dir: Path, disk: Path | None, owns: bool, track_dirty: bool
    ) -> FirecrackerVM:
        vm = self._start(work_dir, snap.compat, disk, owns, error=RestoreFailed)
        vm.memory_path = memory
        try:
            vm.api.put(
                "/snapshot/load",
                {
                    "snapshot_path": str(snap.vmstate),
                    "mem_backend": {"backend_type": "File", "backend_path": str(memory)},
                    "track_dirty_pages": track_dirty,
                    "resume_vm": False,
                },
            )
            if disk is not None:  # drive paths are baked into the vmstate; point at our own disk
                vm.api.patch("/drives/rootfs", {"drive_id": "rootfs", "path_on_host": str(disk)})
            vm.resume()
            vm.reseed(clock_ns=time.time_ns())
        except VmmError as exc:
            detail = vm.diagnostics()
            vm.kill()
            raise RestoreFailed(f"restore of {snap.vmstate} in {work_dir} failed: {exc}\n{detail}") from exc
        return vm


def _drive(path: Path) -> dict[str, object]:
    # The initramfs is the root filesystem; the disk is a data disk (is_root_device false).
    return {"drive_id": "rootfs", "path_on_host": str(path), "is_root_device": False, "is_read_only": False}
