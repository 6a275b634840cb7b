"""The VMM driver contract: one small interface every hypervisor backend implements.

A driver boots a VM from a kernel + initramfs, snapshots it into a pair of files
(``memory.bin``: raw guest RAM, ``vmstate``: device and CPU state), and forks copy-on-write
children from such a pair. The hub client drives exactly three flows through it:

* **base snapshot**: ``vm = driver.boot(spec)`` → work in the guest → ``driver.snapshot(vm, out_dir)``.
* **chain link**: the caller clones the parent's assembled ``memory.bin`` (reflink or copy) to a
  writable path, then ``vm = driver.restore_writable(parent, that_path, work_dir)`` → work →
  ``driver.snapshot(vm, out_dir)``. The guest's writes land in the clone only.
* **fork**: ``driver.fork(assembled, n)`` → ``n`` resumed children that map ``memory.bin``
  privately (``MAP_PRIVATE``): they share its page cache and never write to it.
  ``driver.start_fork(assembled, n).finish()`` is the same in two steps: the children's processes
  may start at once (a driver that can, QEMU, does), and ``vmstate`` need only exist when
  ``finish`` restores them, so a caller can fetch it while they start (a lazy fork).

Every method raises only ``vmm.errors`` types; each docstring lists which.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vmm.errors import CompatibilityError, GuestCommandFailed, RestoreFailed, VmmError

MEMORY_FILE = "memory.bin"
VMSTATE_FILE = "vmstate"
ROOTFS_FILE = "rootfs.ext4"
COMPAT_FILE = "vmm.json"
#: device ids recorded in ``CompatInfo.device_ids``: the disk and the NIC
ROOTFS_DEVICE = "rootfs"
NIC_DEVICE = "net0"


@dataclass(frozen=True)
class Availability:
    """Whether a driver can run here, with which accelerator, and why (not)."""

    ok: bool
    accel: str | None
    reason: str


@dataclass(frozen=True)
class BootSpec:
    """What to boot. ``work_dir`` receives the VM's memory file, sockets and logs."""

    kernel: Path
    initrd: Path | None
    cmdline: str
    work_dir: Path
    rootfs: Path | None = None
    mem_mib: int = 256
    vcpus: int = 1
    boot_timeout: float = 90.0
    #: attach a virtio NIC (device id ``net0``); a snapshot's children then get one too
    nic: bool = False
    #: let that NIC's packets out (user-mode NAT: the guest reaches what the host reaches, the
    #: host's own loopback as 10.0.2.2); without it the NIC is isolated
    network: bool = False


# Fields a host must reproduce exactly to restore a snapshot. Kernel fields are informational:
# the kernel lives in the snapshot's RAM, so the host needs no copy of it.
RESTORE_CRITICAL_FIELDS = (
    "vmm",
    "vmm_version",
    "machine",
    "accel",
    "arch",
    "cpu_model",
    "vcpus",
    "mem_mib",
    "device_ids",
)


@dataclass(frozen=True)
class CompatInfo:
    """Everything a restore depends on, recorded next to a snapshot (and in the layer manifest)."""

    vmm: str
    vmm_version: str
    machine: str
    accel: str
    arch: str
    cpu_model: str
    vcpus: int
    mem_mib: float  # whole MiB; fractional only for an odd-sized memory file (never matches)
    device_ids: tuple[str, ...] = ()
    kernel_release: str | None = None
    kernel_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (device ids as a list)."""
        data = dataclasses.asdict(self)
        data["device_ids"] = list(self.device_ids)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompatInfo:
        """Parse what ``to_dict`` wrote. Raises ``VmmError`` naming a missing or unknown field."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise VmmError(f"compat info has unknown field(s): {', '.join(unknown)}")
        try:
            values = dict(data)
            values["device_ids"] = tuple(values.get("device_ids", ()))
            return cls(**values)
        except TypeError as exc:
            raise VmmError(f"compat info is incomplete: {exc}") from exc


def check_compat(recorded: CompatInfo, host: CompatInfo, fields: tuple[str, ...] = RESTORE_CRITICAL_FIELDS) -> None:
    """Refuse a restore whose recorded configuration differs from the host's.

    Raises ``CompatibilityError`` whose message names every differing field with both values,
    e.g. ``accel: recorded 'kvm', here 'tcg'``; ``.fields`` holds the same.
    """
    diffs = {
        name: (getattr(recorded, name), getattr(host, name))
        for name in fields
        if getattr(recorded, name) != getattr(host, name)
    }
    if diffs:
        parts = "; ".join(f"{name}: recorded {old!r}, here {new!r}" for name, (old, new) in diffs.items())
        raise CompatibilityError(f"snapshot cannot be restored here ({parts})", diffs)


@dataclass(frozen=True)
class SnapshotFiles:
    """A restorable snapshot: raw guest RAM, device/CPU state, the compat record, optional disk."""

    memory: Path
    vmstate: Path
    compat: CompatInfo
    rootfs: Path | None = None

    def save_compat(self, directory: Path | None = None) -> Path:
        """Write the compat record as ``vmm.json`` (next to the vmstate by default)."""
        target = Path(directory or self.vmstate.parent) / COMPAT_FILE
        payload = {"compat": self.compat.to_dict(), "rootfs": self.rootfs.name if self.rootfs else None}
        tmp = target.with_name(target.name + ".partial")
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
        tmp.replace(target)
        return target

    @classmethod
    def load(cls, directory: Path, compat: CompatInfo | None = None) -> SnapshotFiles:
        """Open ``memory.bin`` + ``vmstate`` in ``directory``; compat from ``vmm.json`` unless given.

        Raises ``RestoreFailed`` if a file is missing or the record is unreadable.
        """
        directory = Path(directory)
        memory, vmstate = directory / MEMORY_FILE, directory / VMSTATE_FILE
        for path in (memory, vmstate):
            if not path.is_file():
                raise RestoreFailed(f"snapshot file missing: {path}")
        rootfs = None
        if compat is None:
            try:
                payload = json.loads((directory / COMPAT_FILE).read_text())
                compat = CompatInfo.from_dict(payload["compat"])
            except (OSError, ValueError, KeyError, VmmError) as exc:
                raise RestoreFailed(f"unreadable compat record {directory / COMPAT_FILE}: {exc}") from exc
            if payload.get("rootfs"):
                rootfs = directory / Path(payload["rootfs"]).name
        return cls(memory=memory, vmstate=vmstate, compat=compat, rootfs=rootfs)


@dataclass(frozen=True)
class ExecResult:
    """What a guest command returned: its exit status and combined stdout+stderr."""

    exit_code: int
    output: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class MemStats:
    """Host memory of one VM process, in bytes.

    ``rss``/``pss``/``private_dirty`` cover the whole process (smaps_rollup); the ``guest_ram_*``
    numbers cover only the mapping of the guest memory file, which is where copy-on-write shows:
    a forked child's ``guest_ram_private_dirty`` is the RAM it has written since the fork.
    """

    rss: int
    pss: int
    private_dirty: int
    guest_ram_pss: int
    guest_ram_private_dirty: int


class VM(abc.ABC):
    """A running (or paused) VM process. Use as a context manager to kill it on exit."""

    #: the VMM process id
    pid: int
    #: directory with this VM's sockets, logs and (for booted VMs) its memory file
    work_dir: Path
    #: the file that backs guest RAM (``memory.bin``); None while RAM is anonymous
    #: (a Firecracker VM before its first snapshot)
    memory_path: Path | None
    #: the configuration this VM runs with; recorded into its snapshots
    compat: CompatInfo

    @abc.abstractmethod
    def run(self, cmd: str, timeout: float = 30.0, check: bool = False) -> ExecResult:
        """Run ``cmd`` with ``sh`` in the guest through the guest agent.

        Raises ``GuestCommandTimeout`` if no answer arrives in ``timeout`` seconds (plus a grace),
        ``GuestCommandFailed`` if ``check`` and the exit status is non-zero, ``VmmError`` if the
        VM is gone.
        """

    @abc.abstractmethod
    def reseed(self, entropy: bytes | None = None, clock_ns: int | None = None) -> None:
        """Feed fresh host entropy to the guest kernel RNG and force a CRNG reseed; with
        ``clock_ns`` (nanoseconds since the epoch) also set the guest's wall clock to it.

        Raises ``GuestCommandFailed`` if the guest could not reseed or set its clock.
        """

    @abc.abstractmethod
    def pause(self) -> None:
        """Stop the vCPUs. Raises ``VmmProtocolError``."""

    @abc.abstractmethod
    def resume(self) -> None:
        """Continue the vCPUs. Raises ``VmmProtocolError``."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill the VMM process, reap it and close its channels. Idempotent; never raises."""

    @abc.abstractmethod
    def detach(self) -> int:
        """Let the VM outlive this Python process: it leaves the exit-time reaper and keeps its
        work dir. Returns the pid; stop it later with ``kill <pid>``."""

    @abc.abstractmethod
    def mem_stats(self) -> MemStats:
        """Host memory used by this VM. Raises ``VmmError`` if the process is gone."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """True while the VMM process runs."""

    def check_output(self, cmd: str, timeout: float = 30.0) -> str:
        """``run(cmd, check=True).output``. Raises like ``run``."""
        return self.run(cmd, timeout=timeout, check=True).output

    def __enter__(self) -> VM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()


class StartedFork:
    """Children of a fork whose processes may already run, not restored yet (:meth:`Driver.start_fork`).

    Call :meth:`finish` once (the resumed children; the snapshot's ``vmstate`` must exist by then)
    or :meth:`cancel` (idempotent; kills what was started). ``finish`` raises what ``fork`` raises,
    and on failure leaves nothing running.
    """

    def __init__(self, finish: Callable[[], list[VM]], cancel: Callable[[], None] = lambda: None) -> None:
        self._finish, self._cancel = finish, cancel

    def finish(self) -> list[VM]:
        return self._finish()

    def cancel(self) -> None:
        self._cancel()


class Driver(abc.ABC):
    """One hypervisor backend. Implementations: ``QemuMicrovmDriver``, ``FirecrackerDriver``."""

    #: "qemu-microvm" | "firecracker"
    name: str

    @abc.abstractmethod
    def available(self) -> Availability:
        """Probe binary, version and accelerator. Never raises; the reason says what is missing."""

    @abc.abstractmethod
    def boot(self, spec: BootSpec) -> VM:
        """Boot a VM whose RAM is a file in ``spec.work_dir``, and wait until its agent answers.

        Raises ``VmmUnavailable`` (no binary/accelerator), ``BootFailed`` (the VMM exited or the
        agent never answered within ``spec.boot_timeout``; the message carries the log tail).
        """

    @abc.abstractmethod
    def snapshot(self, vm: VM, out_dir: Path, *, resume: bool = False) -> SnapshotFiles:
        """Pause ``vm`` and write ``memory.bin``, ``vmstate`` and ``vmm.json`` into ``out_dir``.

        By default the VM is consumed: its process ends and its memory file becomes
        ``out_dir/memory.bin`` (a rename when possible, so it costs nothing). With ``resume=True``
        the memory is cloned instead and the VM continues. Raises ``SnapshotFailed``.
        """

    @abc.abstractmethod
    def check_restorable(self, snap: SnapshotFiles) -> None:
        """Raise ``CompatibilityError`` (naming each differing field) if this host cannot restore
        ``snap``; ``VmmUnavailable`` if the driver cannot run at all."""

    def _prepare_writable(
        self, snap: SnapshotFiles, memory_path: Path, work_dir: Path, disk: Path | None, network: bool, why: str
    ) -> tuple[Path, Path, Path | None]:
        """Shared preconditions of ``restore_writable``: ``memory_path`` must be a clone, not the
        stored file (``why`` says what would go wrong), the snapshot restorable here (with a NIC
        for ``network``); returns the memory path, the work dir (created) and the VM's disk (the
        caller's, else a private copy of the snapshot's in the work dir)."""
        self._check_network(snap, network)
        memory_path = Path(memory_path)
        if memory_path.exists() and os.path.samefile(memory_path, snap.memory):
            raise RestoreFailed(
                f"{memory_path} is the snapshot's own memory file; restore_writable needs a clone ({why})"
            )
        self.check_restorable(dataclasses.replace(snap, memory=memory_path))
        work_dir = Path(work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        return memory_path, work_dir, disk or self._child_disk(snap, work_dir)

    @staticmethod
    def _memory_mib(snap: SnapshotFiles) -> float:
        """The guest RAM size the memory file really has (whole MiB, or fractional so it never
        matches), so a record that lies about it is refused. Raises ``RestoreFailed``."""
        try:
            size = snap.memory.stat().st_size
        except OSError as exc:
            raise RestoreFailed(f"cannot read snapshot memory {snap.memory}: {exc}") from exc
        return size >> 20 if size % (1 << 20) == 0 else round(size / 2**20, 3)

    @staticmethod
    def _child_dir(work_dir: Path | None, index: int, prefix: str) -> tuple[Path, bool]:
        """Child ``index``'s work dir: ``work_dir/child-N`` (kept), else a temp dir the VM owns
        (removed when it is killed)."""
        if work_dir is None:
            return Path(tempfile.mkdtemp(prefix=prefix)), True
        child_dir = Path(work_dir) / f"child-{index}"
        child_dir.mkdir(parents=True, exist_ok=True)
        return child_dir, False

    @staticmethod
    def _save_disk(vm: VM, out_dir: Path, *, keep_running: bool) -> Path | None:
        """The paused VM's disk as ``out_dir/rootfs.ext4`` (None without one): moved when it is
        the VM's own copy (in its work dir) and the VM is done with it, else cloned. Raises ``OSError``."""
        disk: Path | None = getattr(vm, "rootfs", None)
        if disk is None:
            return None
        from manifest.fileops import clone_file
        from vmm.files import move_file

        target = out_dir / ROOTFS_FILE
        if not keep_running and disk.parent.resolve() == Path(vm.work_dir).resolve():
            move_file(disk, target)  # the VM's own copy: no second copy of a large image
        else:
            clone_file(disk, target, replace=True)
        return target

    def _check_network(self, snap: SnapshotFiles, network: bool) -> None:
        """``network=True`` needs a snapshot made with a NIC (devices cannot be added at restore)."""
        if network and NIC_DEVICE not in snap.compat.device_ids:
            raise RestoreFailed(
                "this snapshot has no network device (it was booted without one), so its VMs cannot get a "
                "network; bake it from a root filesystem image (forkd from-image / from-debian) to have one"
            )

    def _child_disk(self, snap: SnapshotFiles, child_dir: Path) -> Path | None:
        """A private copy of the snapshot's disk for one VM (VMMs do not snapshot block contents)."""
        if ROOTFS_DEVICE not in snap.compat.device_ids:
            return None
        if snap.rootfs is None or not snap.rootfs.is_file():
            raise RestoreFailed("snapshot has a rootfs device but no rootfs file; pass disks=")
        from manifest.fileops import clone_file

        target = child_dir / ROOTFS_FILE
        clone_file(snap.rootfs, target, replace=True)
        return target

    def _check_fork(self, snap: SnapshotFiles, n: int, disks: list[Path] | None, network: bool = False) -> None:
        """Shared preconditions of ``fork``."""
        self._check_network(snap, network)
        if n < 1:
            raise RestoreFailed(f"fork needs n >= 1, got {n}")
        if disks is not None and len(disks) != n:
            raise RestoreFailed(f"fork of {n} children got {len(disks)} disks")
        self.check_restorable(snap)

    @abc.abstractmethod
    def restore_writable(
        self, snap: SnapshotFiles, memory_path: Path, work_dir: Path, disk: Path | None = None, *, network: bool = False
    ) -> VM:
        """Restore ``snap`` with guest RAM mapped *shared* on ``memory_path``, a caller-made
        writable clone of ``snap.memory`` (never the stored file itself). The guest's writes land
        in that clone, so ``snapshot(vm, out_dir)`` afterwards yields the next chain link.
        ``network`` lets the snapshot's NIC out (see ``BootSpec.network``); restored VMs are
        reseeded and their wall clock set to the host's.

        Raises ``CompatibilityError``, ``RestoreFailed`` (also for ``network`` without a NIC).
        """

    @abc.abstractmethod
    def fork(
        self,
        snap: SnapshotFiles,
        n: int,
        disks: list[Path] | None = None,
        work_dir: Path | None = None,
        *,
        network: bool = False,
    ) -> list[VM]:
        """Start ``n`` resumed, reseeded copy-on-write children of ``snap``, their wall clocks set
        to the host's.

        ``snap.memory`` is mapped privately and never preallocated: children share its page cache
        and their writes stay in their own anonymous pages; the file is never written. ``disks``
        gives each child its own disk (by default each child writes to a private copy-on-write
        view of ``snap.rootfs``, if any, that is discarded with it). A snapshot's NIC stays
        isolated unless ``network``. Either all ``n`` children start or none is left running.

        Raises ``CompatibilityError``, ``RestoreFailed``.
        """

    def start_fork(self, snap: SnapshotFiles, n: int, *, network: bool = False) -> StartedFork:
        """``fork(snap, n)`` in two steps (see the module docstring): what can start before
        ``snap.vmstate`` exists starts now. This default starts nothing early.

        Raises ``CompatibilityError``, ``RestoreFailed`` (here or from ``finish``).
        """
        return StartedFork(lambda: self.fork(snap, n, network=network))


def require_agent_ok(result: ExecResult, what: str) -> ExecResult:
    """Raise ``GuestCommandFailed`` naming ``what`` when ``result`` has a non-zero exit status."""
    if not result.ok:
        raise GuestCommandFailed(
            f"{what} exited with status {result.exit_code}: {result.output.strip()[-500:]}",
            result.exit_code,
            result.output,
        )
    return result
