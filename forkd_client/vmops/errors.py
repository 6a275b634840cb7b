"""Errors of the VMM verbs (``snapshot``, ``snapshot-diff``, ``fork``) that are not ``vmm``'s own.

    ClientError
    ├── VmSetupError      the VMM or the guest image cannot be used here; says what to install
    └── GuestExecFailed   the ``--exec`` command exited non-zero (``exit_code``, ``output``)

Everything else the drivers raise stays a ``vmm.errors.VmmError`` (``CompatibilityError``
naming the differing fields, ``BootFailed``, ``RestoreFailed`` …); the CLI prints both kinds
as ``forkd: error: …``.
"""

from __future__ import annotations

from ..errors import ClientError

#: the Debian packages the QEMU driver and the guest build need
INSTALL_HINT = "apt-get install qemu-system-x86 busybox-static cpio"
_OUTPUT_TAIL = 1500


class VmSetupError(ClientError):
    """The VMM cannot run here, or the guest image cannot be built or read."""


class GuestExecFailed(ClientError):
    """A command run in the guest before a snapshot exited non-zero; nothing was saved."""

    def __init__(self, cmd: str, exit_code: int, output: str, *, what: str) -> None:
        tail = output.strip()[-_OUTPUT_TAIL:]
        shown = f"; its output ends with:\n{tail}" if tail else " and printed nothing"
        super().__init__(f"--exec {cmd!r} exited with status {exit_code} in the guest, so {what} was not saved{shown}")
        self.cmd = cmd
        self.exit_code = exit_code
        self.output = output
