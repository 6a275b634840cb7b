"""One unit convention for every size a person reads, in both command lines' reports: IEC (KiB, MiB,
GiB), bytes below 1 KiB. ``--json`` output always carries plain byte counts; this is only for people.
"""

from __future__ import annotations

__all__ = ["human_size"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_size(n: float) -> str:
    """``1536`` → ``1.5 KiB``; bytes below 1 KiB stay exact (``512 B``)."""
    size = float(n)
    for unit in _UNITS:
        if size < 1024 or unit == _UNITS[-1]:
            return f"{int(n)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
