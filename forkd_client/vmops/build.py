"""Making snapshots with a VMM: a base from a booted guest, a chain link from a restored parent.

Both go through the store's one install path, so a snapshot appears atomically or not at all:

1. ``store.staging(...)`` gives a directory on the store's filesystem. The VM's work files
   (memory file, sockets, logs) live in its ``vm/`` subdirectory; for a link, the parent's
   ``memory.bin`` is first cloned (reflink where possible) to ``<staging>/memory.bin`` and the
   parent restored *writable* on that clone, never on the stored file.
2. The optional ``--exec`` command runs in the guest; a non-zero exit kills the VM and raises
   :class:`GuestExecFailed`, and the staging directory is deleted with everything in it.
3. ``driver.snapshot`` writes ``memory.bin`` (a rename of the VM's memory file) and ``vmstate``
   into the staging directory; the VM's work files and the driver's ``vmm.json`` are dropped
   (its compat goes, mapped to the manifest vocabulary, into ``forkd-hub.json``).
4. ``store.prepare`` (digests, snapshot.json, forkd-hub.json) then ``store.commit`` (rename).

A link is stored fully materialised, like forkd's; the chunks it changed against its parent
(what a push uploads as its layer) are counted with :func:`manifest.diff.diff_files`.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manifest.chunking import DEFAULT_CHUNK_SIZE
from manifest.diff import diff_files
from manifest.fileops import clone_file
from manifest.holes import fill_unsafe_holes
from manifest.mediatypes import MEMORY_FILE
from vmm import VM, BootSpec, Driver, ExecResult, SnapshotFiles
from vmm.base import COMPAT_FILE, ROOTFS_FILE

from ..errors import DependentsExist, SnapshotExists
from ..install import PrepareSpec
from ..snapdir import LocalSnapshot, validate_tag
from ..store import SnapshotStore
from ..vmmcompat import to_manifest_compat
from .errors import GuestExecFailed
from .host import load_guest, require_driver, restorable

#: annotation naming the command a snapshot was made with
ANNOTATION_EXEC = "dev.forkd.exec"
DEFAULT_EXEC_TIMEOUT = 600.0
VM_WORK_DIR = "vm"


@dataclass(frozen=True)
class LayerDiff:
    """How a link's memory.bin differs from its parent's, in chunks (what its pushed layer holds)."""

    chunk_size: int
    total_chunks: int
    changed_chunks: int  # includes chunks that became all zero
    zeroed_chunks: int

    @property
    def layer_bytes(self) -> int:
        """Upper bound of the layer's uncompressed data: changed chunks that are not zero."""
        return (self.changed_chunks - self.zeroed_chunks) * self.chunk_size

    def to_obj(self) -> dict[str, int]:
        return {
            "chunk_size": self.chunk_size,
            "total_chunks": self.total_chunks,
            "changed_chunks": self.changed_chunks,
            "zeroed_chunks": self.zeroed_chunks,
            "layer_bytes": self.layer_bytes,
        }


@dataclass
class SnapshotResult:
    """What ``snapshot``/``snapshot-diff`` made, how long each step took, what ``--exec`` printed."""

    snapshot: LocalSnapshot
    timings_ms: dict[str, float] = field(default_factory=dict)
    exec_result: ExecResult | None = None
    diff: LayerDiff | None = None

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "tag": self.snapshot.tag,
            "parent_tag": self.snapshot.parent_tag,
            "dir": str(self.snapshot.dir),
            "compat": dict(self.snapshot.compat),
            "annotations": dict(self.snapshot.annotations),
            "logical_size": self.snapshot.logical_size,
            "disk_size": self.snapshot.disk_size,
            "timings_ms": {k: round(v, 1) for k, v in self.timings_ms.items()},
            "exec": None
            if self.exec_result is None
            else {"exit_code": self.exec_result.exit_code, "output": self.exec_result.output},
        }
        if self.diff is not None:
            obj["diff"] = self.diff.to_obj()
        return obj


@dataclass(frozen=True)
class GuestSteps:
    """What runs in the guest before it is snapshotted: shell commands in order (each like a
    Dockerfile ``RUN`` line; the first that fails stops the bake), each under ``timeout``
    seconds, with the guest's NIC let out (``network``) or isolated."""

    commands: tuple[str, ...] = ()
    timeout: float = DEFAULT_EXEC_TIMEOUT
    network: bool = False

    @classmethod
    def of(
        cls, commands: str | Sequence[str] | None, timeout: float = DEFAULT_EXEC_TIMEOUT, network: bool = False
    ) -> GuestSteps:
        """From one command, several, or none."""
        if commands is None:
            return cls((), timeout, network)
        return cls((commands,) if isinstance(commands, str) else tuple(commands), timeout, network)

    @property
    def annotation(self) -> str | None:
        """The ``dev.forkd.exec`` annotation: the commands, one per line (None: none ran)."""
        return "\n".join(self.commands) if self.commands else None


def snapshot_base(
    store: SnapshotStore,
    tag: str,
    *,
    mem_mib: int = 256,
    vcpus: int = 1,
    guest: str | Path | None = None,
    exec_cmd: str | Sequence[str] | None = None,
    exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
    force: bool = False,
    vmm: str | None = None,
) -> SnapshotResult:
    """Boot the guest, run ``exec_cmd`` (if any), snapshot it and install it as base ``tag``.

    ``force`` replaces an existing ``tag`` unless other snapshots chain on it.
    Raises InvalidTag, SnapshotExists, DependentsExist, VmSetupError (no QEMU, guest build
    failed), GuestExecFailed, and vmm's BootFailed / SnapshotFailed / GuestCommandTimeout.
    Nothing is left behind on any error.
    """
    check_new_base(store, tag, force)
    driver = require_driver(vmm)
    image = load_guest(guest)
    steps = GuestSteps.of(exec_cmd, exec_timeout)
    with store.staging(f"snapshot-{tag}") as staged:
        spec = image.boot_spec(staged / VM_WORK_DIR, mem_mib=mem_mib, vcpus=vcpus)
        return _bake_base(store, driver, spec, staged, tag, steps, {}, force)


def snapshot_rootfs(
    store: SnapshotStore,
    tag: str,
    rootfs: Path,
    *,
    mem_mib: int = 512,
    vcpus: int = 1,
    steps: GuestSteps = GuestSteps(),
    annotations: dict[str, str] | None = None,
    guest: str | Path | None = None,
    force: bool = False,
    vmm: str | None = None,
) -> SnapshotResult:
    """Boot a copy of the ext4 image ``rootfs`` as the guest's root filesystem (the project's
    kernel and agent; the image itself is never written), run ``steps``, snapshot it and install
    it as base ``tag`` with ``annotations`` (e.g. the image's provenance). The guest gets a NIC,
    isolated unless ``steps.network``; the snapshot's disk is its ``rootfs.ext4``.

    Raises what :func:`snapshot_base` raises, and OSError when ``rootfs`` cannot be copied.
    Nothing is left behind on any error.
    """
    check_new_base(store, tag, force)
    driver = require_driver(vmm)
    image = load_guest(guest)
    with store.staging(f"snapshot-{tag}") as staged:
        disk = staged / VM_WORK_DIR / ROOTFS_FILE
        disk.parent.mkdir(parents=True)
        started = time.monotonic()
        clone_file(rootfs, disk)  # the VM writes its disk: never the cached image
        copy_ms = _ms_since(started)
        spec = image.root_boot_spec(staged / VM_WORK_DIR, disk, mem_mib=mem_mib, vcpus=vcpus, network=steps.network)
        result = _bake_base(store, driver, spec, staged, tag, steps, annotations or {}, force)
    result.timings_ms["rootfs_copy_ms"] = copy_ms
    return result


def check_new_base(store: SnapshotStore, tag: str, force: bool) -> None:
    """``tag`` may become a new base: valid, and free (or ``force`` and nothing chains on it).
    Raises InvalidTag, SnapshotExists, DependentsExist."""
    validate_tag(tag)
    if store.exists(tag):
        if not force:
            raise SnapshotExists(tag, replaceable=True)
        if dependents := store.dependents(tag):
            raise DependentsExist(tag, dependents)


def _bake_base(
    store: SnapshotStore,
    driver: Driver,
    spec: BootSpec,
    staged: Path,
    tag: str,
    steps: GuestSteps,
    annotations: dict[str, str],
    force: bool,
) -> SnapshotResult:
    timings: dict[str, float] = {}
    started = time.monotonic()
    vm = driver.boot(spec)
    timings["boot_ms"] = _ms_since(started)
    snap, result = _exec_and_snapshot(driver, vm, staged, steps, timings, what=f"snapshot {tag!r}")
    installed = _install(store, staged, tag, snap, _annotations(steps, annotations), timings, force=force)
    return SnapshotResult(installed, timings, result)


def snapshot_diff(
    store: SnapshotStore,
    parent: str,
    tag: str,
    exec_cmd: str | Sequence[str],
    *,
    exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
    vmm: str | None = None,
    network: bool = False,
) -> SnapshotResult:
    """Restore ``parent`` writable on a clone of its memory, run ``exec_cmd`` (one command or
    several, in order), install link ``tag``. ``network`` lets the parent's NIC out (it must
    have one: snapshots baked from a root filesystem image do).

    ``parent``'s chain is verified first (through the verified record: no re-hash of unchanged
    files) and its compat checked against this host. The link records ``parent_content_hash``
    = sha256 of the parent's memory.bin; the result's ``diff`` counts the 64 KiB chunks changed.

    Raises InvalidTag, SnapshotExists, SnapshotNotFound, ChainBroken, ParentContentMismatch,
    VmSetupError, CompatibilityError (naming the fields), GuestExecFailed, and vmm's
    RestoreFailed (also for ``network`` without a NIC) / SnapshotFailed / GuestCommandTimeout.
    Nothing is left behind on any error.
    """
    validate_tag(tag)
    steps = GuestSteps.of(exec_cmd, exec_timeout, network)
    if not steps.commands:
        raise ValueError("snapshot-diff needs at least one command to run")
    if store.exists(tag):
        raise SnapshotExists(tag)
    timings: dict[str, float] = {}
    started = time.monotonic()
    head = store.verify_chain(parent)[-1]
    timings["verify_ms"] = _ms_since(started)
    driver = require_driver(vmm or head.compat.get("vmm"))
    source = restorable(head, driver)
    parent_hash = store.memory_sha256(parent)
    with store.staging(f"diff-{tag}") as staged:
        started = time.monotonic()
        clone_file(source.memory, staged / MEMORY_FILE)
        timings["clone_ms"] = _ms_since(started)
        started = time.monotonic()
        vm = driver.restore_writable(source, staged / MEMORY_FILE, staged / VM_WORK_DIR, network=network)
        timings["restore_ms"] = _ms_since(started)
        snap, result = _exec_and_snapshot(driver, vm, staged, steps, timings, what=f"snapshot {tag!r}")
        started = time.monotonic()
        fill_unsafe_holes(snap.memory, source.memory)  # forkd reads a link's holes as the parent's bytes
        diff = count_changed_chunks(source.memory, snap.memory)
        timings["diff_ms"] = _ms_since(started)
        installed = _install(
            store, staged, tag, snap, _annotations(steps, {}), timings, parent=parent, parent_hash=parent_hash
        )
    return SnapshotResult(installed, timings, result, diff)


def count_changed_chunks(parent: Path, child: Path, chunk_size: int = DEFAULT_CHUNK_SIZE) -> LayerDiff:
    """Count the chunks of ``child`` that differ from ``parent`` (only allocated ranges are read)."""
    changed = zeroed = 0
    for change in diff_files(parent, child, chunk_size):
        changed += 1
        zeroed += change.is_zero
    size = child.stat().st_size
    return LayerDiff(chunk_size, -(-size // chunk_size), changed, zeroed)


def _exec_and_snapshot(
    driver: Driver,
    vm: VM,
    staged: Path,
    steps: GuestSteps,
    timings: dict[str, float],
    *,
    what: str,
) -> tuple[SnapshotFiles, ExecResult | None]:
    """Run the steps, snapshot into ``staged`` (consuming the VM), drop the VM's work files.
    The result is the steps' outputs joined, with the last step's exit status."""
    result = None
    try:
        if steps.commands:
            started = time.monotonic()
            outputs: list[str] = []
            for command in steps.commands:
                step = vm.run(command, timeout=steps.timeout)
                outputs.append(step.output)
                if not step.ok:
                    raise GuestExecFailed(command, step.exit_code, step.output, what=what)
            result = ExecResult(0, "".join(outputs))
            timings["exec_ms"] = _ms_since(started)
        started = time.monotonic()
        snap = driver.snapshot(vm, staged)
        timings["snapshot_ms"] = _ms_since(started)
    finally:
        vm.kill()  # idempotent: a snapshot has already consumed it
    shutil.rmtree(staged / VM_WORK_DIR)
    (staged / COMPAT_FILE).unlink(missing_ok=True)  # its facts go to forkd-hub.json
    return snap, result


def _annotations(steps: GuestSteps, declared: dict[str, str]) -> dict[str, str] | None:
    """The snapshot's annotations: ``declared`` (e.g. provenance) and the commands that ran."""
    merged = dict(declared)
    if steps.annotation is not None:
        merged[ANNOTATION_EXEC] = steps.annotation
    return merged or None


def _install(
    store: SnapshotStore,
    staged: Path,
    tag: str,
    snap: SnapshotFiles,
    annotations: dict[str, str] | None,
    timings: dict[str, float],
    *,
    parent: str | None = None,
    parent_hash: str | None = None,
    force: bool = False,
) -> LocalSnapshot:
    started = time.monotonic()
    store.prepare(
        staged,
        PrepareSpec(
            tag,
            parent=parent,
            parent_content_hash=parent_hash,
            compat=to_manifest_compat(snap.compat),
            annotations=annotations,
        ),
    )
    installed = store.commit([(staged, tag)], force=force)[0]
    timings["install_ms"] = _ms_since(started)
    return installed


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000
