"""The vmm package's error vocabulary.

Every error a driver raises is a ``VmmError``. Callers that only care "did the VM work" catch
``VmmError``; callers that want to react (fall back to another driver, re-pull a snapshot, show a
compatibility diff) catch the precise subclass. Foreign errors (OSError from subprocess, socket
timeouts, JSON decode errors, HTTP errors from Firecracker's API) are translated into these at the
driver boundary and never leak past ``vmm``.

    VmmError
    ├── VmmUnavailable        the VMM binary, accelerator or guest image is missing or unusable
    ├── GuestBuildError       building the guest kernel/initramfs failed
    ├── BootFailed            the VMM process died or the guest agent never answered
    ├── SnapshotFailed        pause/migrate/snapshot-create failed
    ├── RestoreFailed         a restore or fork could not start or load the state
    │   └── CompatibilityError  the snapshot was made by a VMM configuration this host cannot restore
    ├── VmmProtocolError      QMP or the Firecracker API answered with an error or garbage
    └── GuestCommandFailed    a command in the guest exited non-zero (only when asked to check)
        └── GuestCommandTimeout   the guest agent did not answer in time (also a TimeoutError)
"""

from __future__ import annotations


class VmmError(Exception):
    """Base class of every error raised by the vmm package."""


class VmmUnavailable(VmmError):
    """The VMM (binary, accelerator, guest image) cannot be used on this host."""


class GuestBuildError(VmmError):
    """Building the guest image (kernel download, initramfs) failed."""


class BootFailed(VmmError):
    """A VM did not come up: the VMM exited, or the guest agent never answered."""


class SnapshotFailed(VmmError):
    """Taking a snapshot failed (pause, migration or snapshot-create error)."""


class RestoreFailed(VmmError):
    """Restoring a snapshot (fork, writable restore) failed."""


class CompatibilityError(RestoreFailed):
    """A snapshot was recorded under a VMM configuration that differs from this host's.

    ``fields`` maps each differing field name to ``(recorded, host)``.
    """

    def __init__(self, message: str, fields: dict[str, tuple[object, object]] | None = None) -> None:
        super().__init__(message)
        self.fields: dict[str, tuple[object, object]] = dict(fields or {})


class VmmProtocolError(VmmError):
    """The VMM's control channel (QMP, Firecracker API) returned an error or an unreadable reply."""


class GuestCommandFailed(VmmError):
    """A command run in the guest exited with a non-zero status (raised only when checked)."""

    def __init__(self, message: str, exit_code: int | None = None, output: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.output = output


class GuestCommandTimeout(GuestCommandFailed, TimeoutError):
    """The guest agent did not answer a command within its timeout."""
