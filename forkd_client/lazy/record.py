"""Recording a snapshot's page-access profile where it is: ``forkd push --record-profile``.

A lazy fork fetches the chunks its children read first before it lets them run, when the head
has an access profile on the hub (:mod:`.profile`). A fork records one (``forkd fork --lazy
--save-profile``), but then the *first* lazy fork of a pushed head has none and waits for the hub
at every first touch. The publisher can record it instead, from its local copy: one child of the
local head is started with its memory image (and its root filesystem, when it has one) served
through the same FUSE mount a lazy fork uses (:class:`~.fusefs.LazyMount`), backed here by the
local files (:class:`RecordingImage`), runs a command (default ``true``: the restore and the guest
agent's first answer, what every fork needs), and the order in which its reads first touched each
chunk of each file is the profile. The bytes served are the local files'; nothing is written (the
child's disk writes go to its own overlay).

Errors: LazyUnsupported (no FUSE here), ProfileNotRecorded (the child's command failed), the
errors of :func:`forkd_client.vmops.fork` (SnapshotNotFound, ChainBroken, VmSetupError,
CompatibilityError, RestoreFailed), VmmError, OSError.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

from manifest import mediatypes as mt
from vmm import VmmError

from ..store import SnapshotStore
from ..vmops.host import require_driver, restorable
from .errors import ProfileNotRecorded
from .fusefs import LazyMount
from .profile import FileProfile, FirstTouches

#: what a recording child runs by default: nothing but the restore and the agent's answer
DEFAULT_PROFILE_EXEC = "true"
PROFILE_EXEC_TIMEOUT_S = 600.0


class RecordingImage:
    """A local file at ``path`` (a memory image, a disk image) served through a mount: reads return
    its bytes, and the first read of each ``chunk_size`` chunk is appended to :attr:`profile` (as a
    lazy image does)."""

    def __init__(self, path: Path, chunk_size: int) -> None:
        if chunk_size <= 0:
            raise ValueError(f"chunk size must be positive, got {chunk_size}")
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.size = os.fstat(self._fd).st_size
        self.chunk_size = chunk_size
        self._touches = FirstTouches(-(-self.size // chunk_size))
        self.profile = self._touches.order  # chunk indexes in the order reads first touched them

    def read(self, offset: int, size: int) -> bytes:
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        self._touches.touch(range(offset // self.chunk_size, (end - 1) // self.chunk_size + 1))
        return os.pread(self._fd, end - offset, offset)

    def close(self) -> None:
        """Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def record_profile(
    store: SnapshotStore,
    tag: str,
    chunk_size: int,
    *,
    exec_cmd: str = DEFAULT_PROFILE_EXEC,
    timeout: float = PROFILE_EXEC_TIMEOUT_S,
    vmm: str | None = None,
) -> list[FileProfile]:
    """The access profile of local snapshot ``tag``'s head: one child forked from it through a
    recording mount runs ``exec_cmd``; returns, for its memory image and then (when it has one) its
    root filesystem, the chunk indexes (of ``chunk_size``) its reads first touched, in order.
    Raises what the module raises."""
    chain = store.verify_chain(tag)
    head = chain[-1]
    driver = require_driver(vmm or head.compat.get("vmm"))
    snap = restorable(head, driver)
    images = {mt.MEMORY_FILE: RecordingImage(snap.memory, chunk_size)}
    try:
        if snap.rootfs is not None:
            images[mt.ROOTFS_FILE] = RecordingImage(snap.rootfs, chunk_size)
        with tempfile.TemporaryDirectory(prefix="forkd-profile-") as scratch:
            mount = LazyMount(dict(images), Path(scratch) / "mnt")
            try:
                served = dataclasses.replace(
                    snap,
                    memory=mount.path_of(mt.MEMORY_FILE),
                    rootfs=mount.path_of(mt.ROOTFS_FILE) if mt.ROOTFS_FILE in images else None,
                )
                vm = driver.fork(served, 1)[0]
                try:
                    result = vm.run(exec_cmd, timeout=timeout)
                except VmmError as e:
                    raise ProfileNotRecorded(f"{tag}: the recording child could not run {exec_cmd!r}: {e}") from None
                finally:
                    vm.kill()
            finally:
                mount.unmount()
    finally:
        for image in images.values():
            image.close()
    if result.exit_code != 0:
        raise ProfileNotRecorded(
            f"{tag}: the recording child's {exec_cmd!r} exited {result.exit_code}; no profile recorded"
            + (f" ({result.output.strip()[-200:]})" if result.output.strip() else "")
        )
    return [FileProfile(role, chunk_size, list(image.profile)) for role, image in images.items()]
