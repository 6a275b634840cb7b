"""What the VMM verbs need from this host: a driver, the guest image, restorable stored snapshots.

The driver is picked in exactly one place, :func:`make_driver`: QEMU microvm by default (the
only driver that runs on TCG-only hosts like CI), Firecracker on KVM hosts when asked for
(``--vmm firecracker``) or when the snapshot being restored was made by it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from manifest.mediatypes import MEMORY_FILE, ROOTFS_FILE, VMSTATE_FILE
from vmm import (
    CompatibilityError,
    Driver,
    FirecrackerDriver,
    QemuMicrovmDriver,
    SnapshotFiles,
)
from vmm.errors import GuestBuildError
from vmm.guest import GuestImage, build_guest, cached_guest
from vmm.guest.build import GUEST_FILE

from ..rootfs import is_allowed
from ..snapdir import SNAPSHOT_JSON, LocalSnapshot, read_json_object
from ..vmmcompat import check_host_compat, from_manifest_compat
from .errors import INSTALL_HINT, VmSetupError

#: ``--vmm`` names (and the ``vmm`` compat values they restore) → driver class
DRIVERS: dict[str, type[Driver]] = {
    "qemu": QemuMicrovmDriver,
    QemuMicrovmDriver.name: QemuMicrovmDriver,
    FirecrackerDriver.name: FirecrackerDriver,
}
DEFAULT_DRIVER = "qemu"
#: ``--guest`` value that means "the guest in the default cache"
DEFAULT_GUEST = "DEFAULT"


def make_driver(name: str | None = None) -> Driver:
    """The driver called ``name`` (``qemu``/``qemu-microvm`` or ``firecracker``; None: QEMU).

    Raises VmSetupError for an unknown name.
    """
    cls = DRIVERS.get(name or DEFAULT_DRIVER)
    if cls is None:
        raise VmSetupError(f"unknown VMM {name!r} (choose from: {', '.join(sorted(DRIVERS))})")
    return cls()


def require_driver(name: str | None = None) -> Driver:
    """:func:`make_driver`, checked usable here. Raises VmSetupError saying what to install."""
    driver = make_driver(name)
    status = driver.available()
    if not status.ok:
        if isinstance(driver, FirecrackerDriver):
            hint = (
                "; Firecracker needs the firecracker binary on PATH and hardware KVM "
                "(use --vmm qemu on hosts without them)"
            )
        elif shutil.which(getattr(driver, "binary", "qemu-system-x86_64")) is None:
            hint = f"; install QEMU and the guest tools with: {INSTALL_HINT}"
        else:
            hint = ""  # the binary is there: the reason (version, accelerator) says it all
        raise VmSetupError(f"{driver.name} cannot run here: {status.reason}{hint}")
    return driver


def load_guest(spec: str | Path | None = None) -> GuestImage:
    """The guest to boot: ``None``/``DEFAULT`` is the cached default guest (built on first use),
    a path is a directory holding a guest image as ``vmm.guest.build_guest`` writes it (reused
    while it matches, rebuilt in place when it was built for another agent version).

    Raises VmSetupError naming what failed and what to install.
    """
    try:
        if spec is None or str(spec) == DEFAULT_GUEST:
            return cached_guest()
        path = Path(spec)
        if not (path / GUEST_FILE).is_file():
            raise VmSetupError(
                f"--guest {path}: no guest image there (no {GUEST_FILE}); build one with "
                f"`python -m vmm.guest build --out {path}`, or use --guest {DEFAULT_GUEST}"
            )
        return build_guest(path)  # reused while it matches this vmm version, rebuilt otherwise
    except GuestBuildError as e:
        raise VmSetupError(
            f"cannot build the guest image: {e}; the build needs: {INSTALL_HINT} "
            "(and apt access to download the cloud kernel)"
        ) from e


def restorable(snap: LocalSnapshot, driver: Driver) -> SnapshotFiles:
    """The stored snapshot ``snap`` as driver input, after checking this host can restore it.

    Its compat comes from ``forkd-hub.json`` (the manifest vocabulary, mapped back).
    Raises CompatibilityError naming each differing field (also when the snapshot records no
    compat at all, e.g. one made by forkd itself), VmmUnavailable, OSError.
    """
    memory = snap.dir / MEMORY_FILE
    if not snap.compat:
        raise CompatibilityError(
            f"snapshot {snap.tag!r} records no VMM compat facts (vmm, accel, "
            "memMiB …; made outside forkd-hub?), so it cannot be restored safely"
        )
    check_host_compat(snap.compat, driver, memory=memory, what=f"snapshot {snap.tag!r}")  # type: ignore[arg-type]
    return SnapshotFiles(
        memory=memory,
        vmstate=snap.dir / VMSTATE_FILE,
        compat=from_manifest_compat(snap.compat),
        rootfs=snapshot_rootfs(snap),
    )


def snapshot_rootfs(snap: LocalSnapshot) -> Path | None:
    """The disk image of ``snap``: its own ``rootfs.ext4``, else (forkd's layout) the image its
    snapshot.json names, but only inside the allowed roots (:mod:`forkd_client.rootfs`): a pulled
    or unpacked snapshot.json is someone else's content and must not make a VM disk of an
    arbitrary host file. None when there is none. Raises InvalidSnapshotDir."""
    own = snap.dir / ROOTFS_FILE
    if own.is_file():
        return own
    recorded = (read_json_object(snap.dir / SNAPSHOT_JSON) or {}).get("rootfs")
    if isinstance(recorded, str) and is_allowed(recorded, snap.dir.parent.parent) and Path(recorded).is_file():
        return Path(recorded)
    return None
