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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manifest.chunking import DEFAULT_CHUNK_SIZE
from manifest.diff import diff_files
from manifest.fileops import clone_file
from manifest.holes import fill_unsafe_holes
from manifest.mediatypes import MEMORY_FILE
from vmm import VM, Driver, ExecResult, SnapshotFiles
from vmm.base import COMPAT_FILE

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


def snapshot_base(
    store: SnapshotStore,
    tag: str,
    *,
    mem_mib: int = 256,
    vcpus: int = 1,
    guest: str | Path | None = None,
    exec_cmd: str | None = None,
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
    validate_tag(tag)
    if store.exists(tag):
        if not force:
            raise SnapshotExists(tag)
        if dependents := store.dependents(tag):
            raise DependentsExist(tag, dependents)
    driver = require_driver(vmm)
    image = load_guest(guest)
    timings: dict[str, float] = {}
    with store.staging(f"snapshot-{tag}") as staged:
        started = time.monotonic()
        vm = driver.boot(image.boot_spec(staged / VM_WORK_DIR, mem_mib=mem_mib, vcpus=vcpus))
        timings["boot_ms"] = _ms_since(started)
        snap, result = _exec_and_snapshot(driver, vm, staged, exec_cmd, exec_timeout, timings, what=f"snapshot {tag!r}")
        installed = _install(store, staged, tag, snap, exec_cmd, timings, force=force)
    return SnapshotResult(installed, timings, result)


def snapshot_diff(
    store: SnapshotStore,
    parent: str,
    tag: str,
    exec_cmd: str,
    *,
    exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
    vmm: str | None = None,
) -> SnapshotResult:
    """Restore ``parent`` writable on a clone of its memory, run ``exec_cmd``, install link ``tag``.

    ``parent``'s chain is verified first (through the verified record: no re-hash of unchanged
    files) and its compat checked against this host. The link records ``parent_content_hash``
    = sha256 of the parent's memory.bin; the result's ``diff`` counts the 64 KiB chunks changed.

    Raises InvalidTag, SnapshotExists, SnapshotNotFound, ChainBroken, ParentContentMismatch,
    VmSetupError, CompatibilityError (naming the fields), GuestExecFailed, and vmm's
    RestoreFailed / SnapshotFailed / GuestCommandTimeout. Nothing is left behind on any error.
    """
    validate_tag(tag)
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
        vm = driver.restore_writable(source, staged / MEMORY_FILE, staged / VM_WORK_DIR)
        timings["restore_ms"] = _ms_since(started)
        snap, result = _exec_and_snapshot(driver, vm, staged, exec_cmd, exec_timeout, timings, what=f"snapshot {tag!r}")
        started = time.monotonic()
        fill_unsafe_holes(snap.memory, source.memory)  # forkd reads a link's holes as the parent's bytes
        diff = count_changed_chunks(source.memory, snap.memory)
        timings["diff_ms"] = _ms_since(started)
        installed = _install(store, staged, tag, snap, exec_cmd, timings, parent=parent, parent_hash=parent_hash)
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
    exec_cmd: str | None,
    exec_timeout: float,
    timings: dict[str, float],
    *,
    what: str,
) -> tuple[SnapshotFiles, ExecResult | None]:
    """Run the command, snapshot into ``staged`` (consuming the VM), drop the VM's work files."""
    result = None
    try:
        if exec_cmd is not None:
            started = time.monotonic()
            result = vm.run(exec_cmd, timeout=exec_timeout)
            timings["exec_ms"] = _ms_since(started)
            if not result.ok:
                raise GuestExecFailed(exec_cmd, result.exit_code, result.output, what=what)
        started = time.monotonic()
        snap = driver.snapshot(vm, staged)
        timings["snapshot_ms"] = _ms_since(started)
    finally:
        vm.kill()  # idempotent: a snapshot has already consumed it
    shutil.rmtree(staged / VM_WORK_DIR)
    (staged / COMPAT_FILE).unlink(missing_ok=True)  # its facts go to forkd-hub.json
    return snap, result


def _install(
    store: SnapshotStore,
    staged: Path,
    tag: str,
    snap: SnapshotFiles,
    exec_cmd: str | None,
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
            annotations={ANNOTATION_EXEC: exec_cmd} if exec_cmd is not None else None,
        ),
    )
    installed = store.commit([(staged, tag)], force=force)[0]
    timings["install_ms"] = _ms_since(started)
    return installed


def _ms_since(started: float) -> float:
    return (time.monotonic() - started) * 1000
