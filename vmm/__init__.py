"""VMM drivers behind one contract (``vmm.base``): QEMU microvm and Firecracker.

Typical use::

    from vmm import QemuMicrovmDriver, SnapshotFiles
    from vmm.guest import cached_guest

    driver = QemuMicrovmDriver()
    vm = driver.boot(cached_guest().boot_spec(work_dir))
    snap = driver.snapshot(vm, snap_dir)            # memory.bin + vmstate + vmm.json
    children = driver.fork(snap, 10)                # CoW, resumed, RNG reseeded
"""

from vmm.base import (
    VM,
    Availability,
    BootSpec,
    CompatInfo,
    Driver,
    ExecResult,
    MemStats,
    SnapshotFiles,
    StartedFork,
    check_compat,
)
from vmm.errors import (
    BootFailed,
    CompatibilityError,
    GuestBuildError,
    GuestCommandFailed,
    GuestCommandTimeout,
    RestoreFailed,
    SnapshotFailed,
    VmmError,
    VmmProtocolError,
    VmmUnavailable,
)
from vmm.firecracker.driver import FirecrackerDriver
from vmm.qemu.driver import QemuMicrovmDriver

__all__ = [
    "VM",
    "Availability",
    "BootFailed",
    "BootSpec",
    "CompatInfo",
    "CompatibilityError",
    "Driver",
    "ExecResult",
    "FirecrackerDriver",
    "GuestBuildError",
    "GuestCommandFailed",
    "GuestCommandTimeout",
    "MemStats",
    "QemuMicrovmDriver",
    "RestoreFailed",
    "SnapshotFailed",
    "SnapshotFiles",
    "StartedFork",
    "VmmError",
    "VmmProtocolError",
    "VmmUnavailable",
    "check_compat",
]
