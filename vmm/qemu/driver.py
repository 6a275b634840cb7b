"""``QemuMicrovmDriver``: boot, snapshot and copy-on-write fork with QEMU ``-M microvm``.

Guest RAM is always a file (``memory-backend-file``), so a snapshot is nearly free:

* boot maps ``work_dir/memory.bin`` with ``share=on``; ``snapshot`` runs ``stop`` →
  ``x-ignore-shared`` → ``migrate exec:cat > vmstate`` (device/CPU state only, ~60 KB) and the
  RAM already *is* ``memory.bin``.
* ``fork`` starts children with ``-incoming defer`` and ``share=off`` on the assembled memory.bin
  (a ``MAP_PRIVATE`` mapping: page cache shared, writes private, the file never written), then
  per child over QMP: ``x-ignore-shared`` → ``migrate-incoming exec:cat vmstate`` → wait until
  ``query-status`` leaves ``inmigrate`` → ``cont`` → reseed the guest RNG.
* ``start_fork`` is ``fork`` in two steps: the processes start at once, the QMP restores run
  from ``finish`` (the vmstate need only exist then).
* ``restore_writable`` is the same with ``share=on`` on a caller-made clone, for chain links.

QEMU 7.2 has no ``file:`` migration URI and no ``-global migration.x-ignore-shared``; hence
``exec:`` and the capability set over QMP. Children get no ``-kernel``: RAM holds the kernel, and
the ROM copy would cost ~14 MiB per child. QEMU 7.2 opens the memory file ``O_RDWR`` even with
``share=off``, so ``memory.bin`` must stay writable by the QEMU user; its integrity rests on
hash checks (the caller's), not on file modes. Under TCG the kernel command line gets
``tsc_early_khz=`` and ``tsc=reliable`` (see ``vmm/qemu/host.py``: without them about half the
boots hang in TSC calibration).

Randomness. Children restored from one snapshot start with one kernel CRNG state. Measured on
this host (128 MiB guest, 3 runs of 3 children, first 16 bytes of /dev/urandom read right after
the fork):

* no reseed: all 9 children printed the *same* bytes, identical across runs too;
* 64 host bytes written to /dev/urandom: 7 of 9 still printed a sibling's bytes. A write only
  mixes into the input pool (Linux 6.1); the CRNG keeps its key until its next timed reseed;
* ``-device virtio-rng-device`` (no reseed): distinct within each run, but one child repeated
  another run's bytes exactly. The hwrng thread feeds the pool on its own schedule and forces no
  reseed, so it helps only by timing;
* ``forkd-reseed`` (RNDADDENTROPY + RNDRESEEDCRNG with host bytes, ``vmm/guest/reseed_helper.py``,
  as Firecracker's "random for clones" guidance prescribes): 9 of 9 distinct, ~30 ms per child.

So ``fork`` and ``restore_writable`` run ``forkd-reseed`` right after ``cont`` and fail the restore
if it fails; no virtio-rng device is attached (it would be one more device that must match).
``/proc/sys/kernel/random/boot_id`` stays shared between siblings: the kernel never regenerates it.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
    StartedFork,
    check_compat,
)
from vmm.errors import BootFailed, CompatibilityError, RestoreFailed, SnapshotFailed, VmmError, VmmUnavailable
from vmm.files import move_file
from vmm.qemu import host
from vmm.qemu.vm import CONSOLE_LOG, CONSOLE_SOCKET, QEMU_LOG, QMP_SOCKET, QemuVM

_CONNECT_TIMEOUT = 30.0
#: every guest's NIC has the same address: each VM has its own user-mode network
_GUEST_MAC = "52:54:00:12:34:56"
_MIGRATION_TIMEOUT = 120.0


class QemuMicrovmDriver(Driver):
    """QEMU ``microvm`` with KVM where it really works, TCG (``-cpu max``) otherwise."""

    name = "qemu-microvm"
    machine = "microvm"
    arch = "x86_64"

    def __init__(
        self, binary: str = "qemu-system-x86_64", accel: str | None = None, clock: Callable[[], int] = time.time_ns
    ) -> None:
        """``accel`` (or ``$FORKD_VMM_ACCEL``) forces ``tcg``/``kvm``; by default it is probed.
        ``clock`` is the wall clock (ns since the epoch) restored guests are set to."""
        self.binary = binary
        self._accel_override = accel
        self._clock = clock

    # -- probing ---------------------------------------------------------------------------

    def available(self) -> Availability:
        try:
            version = host.qemu_version(self.binary)
            accel, why = host.pick_accel(self._accel_override)
        except VmmUnavailable as exc:
            return Availability(False, None, str(exc))
        if version < host.MIN_VERSION:
            return Availability(False, accel, f"{self.binary} {version} is older than 7.2")
        if accel == "kvm" and host.kvm_problem() is not None:
            return Availability(False, accel, f"KVM forced but unusable: {host.kvm_problem()}")
        return Availability(True, accel, f"{self.binary} {'.'.join(map(str, version))}; {why}")

    def host_compat(self, mem_mib: float, vcpus: int, device_ids: tuple[str, ...]) -> CompatInfo:
        """The compat record this host would give a VM of this shape. Raises ``VmmUnavailable``."""
        status = self.available()
        if not status.ok or status.accel is None:
            raise VmmUnavailable(f"{self.name} unavailable: {status.reason}")
        return CompatInfo(
            vmm=self.name,
            vmm_version=".".join(map(str, host.qemu_version(self.binary))),
            machine=self.machine,
            accel=status.accel,
            arch=self.arch,
            cpu_model=host.CPU_MODEL[status.accel],
            vcpus=vcpus,
            mem_mib=mem_mib,
            device_ids=device_ids,
        )

    def check_restorable(self, snap: SnapshotFiles) -> None:
        """The recorded compat must equal this host's for a VM whose RAM is ``snap.memory``.

        ``mem_mib`` is taken from the memory file's size, so a record that lies about the size
        is refused as well as one made with another accelerator, QEMU version or device set.
        """
        recorded = snap.compat
        check_compat(recorded, self.host_compat(self._memory_mib(snap), recorded.vcpus, recorded.device_ids))

    # -- boot / snapshot -------------------------------------------------------------------

    def boot(self, spec: BootSpec) -> QemuVM:
        device_ids = ((ROOTFS_DEVICE,) if spec.rootfs else ()) + ((NIC_DEVICE,) if spec.nic else ())
        if spec.network and not spec.nic:
            raise BootFailed("BootSpec.network needs nic=True (a network without a network device)")
        compat = self.host_compat(spec.mem_mib, spec.vcpus, device_ids)
        work_dir = Path(spec.work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        memory = work_dir / MEMORY_FILE
        if memory.exists():
            raise BootFailed(
                f"{memory} already exists; boot needs a fresh work_dir (refusing to overwrite what may be a snapshot)"
            )
        cmdline = spec.cmdline + (" " + " ".join(host.tcg_kernel_args()) if compat.accel == "tcg" else "")
        argv = self._argv(compat, memory, share=True, work_dir=work_dir, disk=spec.rootfs, network=spec.network)
        argv += ["-kernel", str(spec.kernel), "-append", cmdline]
        if spec.initrd:
            argv += ["-initrd", str(spec.initrd)]
        vm = self._start(argv, work_dir, memory, compat, spec.rootfs, owns=False, error=BootFailed)
        try:
            vm.connect(_CONNECT_TIMEOUT)
            release = vm.agent.hello(spec.boot_timeout)
        except VmmError as exc:
            detail = vm.diagnostics()
            vm.kill()
            raise BootFailed(f"guest did not come up: {exc}\n{detail}") from exc
        vm.compat = CompatInfo(
            **{
                **compat.to_dict(),
                "device_ids": device_ids,
                "kernel_release": release,
                "kernel_digest": _sha256(spec.kernel),
            }
        )
        return vm

    def snapshot(self, vm: VM, out_dir: Path, *, resume: bool = False) -> SnapshotFiles:
        if not isinstance(vm, QemuVM) or not vm.alive:
            raise SnapshotFailed(f"{vm!r} is not a running QEMU VM")
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        memory, vmstate = out_dir / MEMORY_FILE, out_dir / VMSTATE_FILE
        in_place = memory.exists() and os.path.samefile(memory, vm.memory_path)  # type: ignore[arg-type]  # typing debt, decisions/0008
        if resume and in_place:
            raise SnapshotFailed(
                "resume=True needs an out_dir other than the VM's memory file's "
                "directory: the running VM would keep writing into the snapshot"
            )
        partial = out_dir / (VMSTATE_FILE + ".partial")
        try:
            vm.pause()
            vm.qmp.execute(
                "migrate-set-capabilities", {"capabilities": [{"capability": "x-ignore-shared", "state": True}]}
            )
            vm.qmp.execute("migrate", {"uri": f"exec:cat > {shlex.quote(str(partial))}"})
            self._wait_migration(vm)
            os.replace(partial, vmstate)
            if resume:
                rootfs = self._save_disk(vm, out_dir, keep_running=True)  # paused and flushed: the RAM's view
                clone_file(vm.memory_path, memory, replace=True)  # type: ignore[arg-type]  # typing debt, decisions/0008
                vm.resume()
            else:
                vm.kill()
                rootfs = self._save_disk(vm, out_dir, keep_running=False)
                if not in_place:
                    move_file(vm.memory_path, memory)  # type: ignore[arg-type]  # typing debt, decisions/0008
        except (VmmError, OSError) as exc:
            partial.unlink(missing_ok=True)
            raise SnapshotFailed(f"snapshot of {vm!r} failed: {exc}") from exc
        snap = SnapshotFiles(memory=memory, vmstate=vmstate, compat=vm.compat, rootfs=rootfs)
        snap.save_compat()
        return snap

    # -- restore ---------------------------------------------------------------------------

    def restore_writable(
        self, snap: SnapshotFiles, memory_path: Path, work_dir: Path, disk: Path | None = None, *, network: bool = False
    ) -> QemuVM:
        memory_path, work_dir, disk = self._prepare_writable(
            snap, memory_path, work_dir, disk, network, "mapping the stored file shared would modify it"
        )
        argv = self._argv(snap.compat, memory_path, share=True, work_dir=work_dir, disk=disk, network=network)
        vm = self._start([*argv, "-incoming", "defer"], work_dir, memory_path, snap.compat, disk, False, RestoreFailed)
        try:
            self._load_state(vm, snap)
        except BaseException:
            vm.kill()
            raise
        vm.memory_path = memory_path
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
        return self.start_fork(snap, n, disks, work_dir, network=network).finish()

    def start_fork(
        self,
        snap: SnapshotFiles,
        n: int,
        disks: list[Path] | None = None,
        work_dir: Path | None = None,
        *,
        network: bool = False,
    ) -> StartedFork:
        """Start every child's process now (``-incoming defer``: it maps ``snap.memory`` and waits);
        ``finish`` drives each child's QMP restore from ``snap.vmstate`` from its own thread.

        Without ``disks``, each child's disk is the snapshot's rootfs opened with ``snapshot=on``:
        QEMU keeps the child's writes in a temporary qcow2 overlay in the child's work dir (so a
        killed child leaves none behind elsewhere), and the stored image is opened read-only. That
        costs nothing per child on any filesystem, where a private copy of a 1 GiB image would cost
        a 1 GiB copy per child without reflinks."""
        self._check_fork(snap, n, disks, network)
        # QEMU start-up dominates and runs in parallel. On any failure nothing is left running.
        vms: list[QemuVM] = []
        temp_dirs: list[Path] = []

        def cancel() -> None:
            for vm in vms:
                vm.kill()
            for leftover in temp_dirs:
                shutil.rmtree(leftover, ignore_errors=True)

        def finish() -> list[VM]:
            try:
                with ThreadPoolExecutor(max_workers=min(n, 16)) as pool:
                    list(pool.map(lambda vm: self._load_state(vm, snap), vms))
            except BaseException:
                cancel()
                raise
            return list(vms)

        try:
            for i in range(n):
                child_dir, owned = self._child_dir(work_dir, i, "forkd-child-")
                if owned:
                    temp_dirs.append(child_dir)
                disk = disks[i] if disks else self._shared_disk(snap)
                argv = [
                    *self._argv(
                        snap.compat,
                        snap.memory,
                        share=False,
                        work_dir=child_dir,
                        disk=disk,
                        disk_overlay=not disks,
                        network=network,
                    ),
                    "-incoming",
                    "defer",
                ]
                vms.append(
                    self._start(
                        argv, child_dir, snap.memory, snap.compat, disk, owns=work_dir is None, error=RestoreFailed
                    )
                )
        except BaseException:
            cancel()
            raise
        return StartedFork(finish, cancel)

    # -- internals -------------------------------------------------------------------------

    def _shared_disk(self, snap: SnapshotFiles) -> Path | None:
        """The snapshot's own disk, for children that write to an overlay of it."""
        if ROOTFS_DEVICE not in snap.compat.device_ids:
            return None
        if snap.rootfs is None or not snap.rootfs.is_file():
            raise RestoreFailed("snapshot has a rootfs device but no rootfs file; pass disks=")
        return snap.rootfs.resolve()

    def _argv(
        self,
        compat: CompatInfo,
        memory: Path,
        share: bool,
        work_dir: Path,
        disk: Path | None,
        *,
        disk_overlay: bool = False,
        network: bool = False,
    ) -> list[str]:
        """The QEMU command line. The devices come from ``compat.device_ids`` (a restore must
        recreate the snapshot's exact device set); ``network`` only opens the NIC's NAT."""
        mem = f"{compat.mem_mib}M"
        argv = [
            self.binary,
            "-M",
            f"{self.machine},memory-backend=mem",
            "-accel",
            compat.accel,
            "-cpu",
            compat.cpu_model,
            "-m",
            mem,
            "-smp",
            str(compat.vcpus),
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            # never prealloc: touching every page would turn shared pages into private ones
            "-object",
            f"memory-backend-file,id=mem,size={mem},mem-path={_opt(memory)},share={'on' if share else 'off'}",
            "-chardev",
            f"socket,id=con,path={CONSOLE_SOCKET},server=on,wait=off,logfile={_opt(work_dir / CONSOLE_LOG)}",
            "-serial",
            "chardev:con",
            "-qmp",
            f"unix:{QMP_SOCKET},server=on,wait=off",
        ]
        if disk is not None:
            argv += [
                "-drive",
                f"id=rootfs,file={_opt(disk)},format=raw,if=none{',snapshot=on' if disk_overlay else ''}",
                "-device",
                "virtio-blk-device,drive=rootfs",
            ]
        if NIC_DEVICE in compat.device_ids:
            argv += [
                "-netdev",
                f"user,id={NIC_DEVICE},restrict={'off' if network else 'on'}",
                "-device",
                f"virtio-net-device,netdev={NIC_DEVICE},mac={_GUEST_MAC}",
            ]
        return argv

    def _start(
        self,
        argv: list[str],
        work_dir: Path,
        memory: Path,
        compat: CompatInfo,
        disk: Path | None,
        owns: bool,
        error: type[VmmError],
    ) -> QemuVM:
        for stale in (QMP_SOCKET, CONSOLE_SOCKET):
            (work_dir / stale).unlink(missing_ok=True)
        try:
            # TMPDIR: where QEMU puts a snapshot=on drive's overlay (a SIGKILLed child cannot unlink it)
            proc = process.spawn(argv, work_dir, work_dir / QEMU_LOG, env={"TMPDIR": str(work_dir)})
        except OSError as exc:
            raise error(f"cannot start {self.binary}: {exc}") from exc
        return QemuVM(proc, work_dir, memory, compat, rootfs=disk, owns_work_dir=owns)

    def _load_state(self, vm: QemuVM, snap: SnapshotFiles) -> None:
        """QMP restore of one started ``-incoming defer`` process, then resume and reseed."""
        try:
            vm.connect(_CONNECT_TIMEOUT)
            vm.qmp.execute(
                "migrate-set-capabilities", {"capabilities": [{"capability": "x-ignore-shared", "state": True}]}
            )
            vm.qmp.execute("migrate-incoming", {"uri": f"exec:cat {shlex.quote(str(snap.vmstate))}"})
            deadline = time.monotonic() + _MIGRATION_TIMEOUT
            while (status := vm.qmp.execute("query-status")["status"]) == "inmigrate":
                if time.monotonic() > deadline or not vm.alive:
                    raise RestoreFailed("incoming migration did not finish")
                time.sleep(0.005)
            if status not in ("paused", "running", "prelaunch"):
                raise RestoreFailed(f"restored VM is in state {status!r}")
            vm.resume()
            vm.reseed(clock_ns=self._clock())
        except VmmError as exc:
            if isinstance(exc, RestoreFailed) and not isinstance(exc, CompatibilityError):
                msg = str(exc)
            else:
                msg = f"{type(exc).__name__}: {exc}"
            raise RestoreFailed(
                f"restore of {snap.vmstate} in {vm.work_dir} failed: {msg}\n{vm.diagnostics()}"
            ) from exc

    def _wait_migration(self, vm: QemuVM) -> None:
        deadline = time.monotonic() + _MIGRATION_TIMEOUT
        while True:
            info = vm.qmp.execute("query-migrate")
            status = info.get("status")
            if status == "completed":
                return
            if status in ("failed", "cancelled") or time.monotonic() > deadline:
                raise SnapshotFailed(f"migration {status or 'timed out'}: {info.get('error-desc', '')}")
            time.sleep(0.005)


def _opt(path: Path) -> str:
    """A path as a QEMU option value (commas are doubled)."""
    return str(path).replace(",", ",,")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()
