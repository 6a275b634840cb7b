"""Progress reports of the long steps, so a CLI can draw bars.

A :data:`Progress` callback is called as ``progress(phase, done, total)`` with ``phase`` one of
:data:`PHASES`; ``done`` and ``total`` count bytes (``total`` is None when unknown, e.g. for the Debian
bootstrap). Calls come from the building thread, often (every few MiB); a callback must be quick and must
not raise.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, int, "int | None"], None]

#: download: registry/layout/archive blobs copied and verified; debootstrap: mmdebstrap running;
#: apply: layer bytes (as stored) read; mkfs: bytes of the image written by mkfs.ext4
PHASES = ("download", "debootstrap", "apply", "mkfs")


def no_progress(phase: str, done: int, total: int | None) -> None:
    """The default callback: report nothing."""
