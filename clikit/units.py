"""One unit convention for every size a person reads, in both command lines' reports: IEC (KiB, MiB,
GiB), bytes below 1 KiB. ``--json`` output always carries plain byte counts; this is only for people.
"""

from __future__ import annotations

__all__ = ["human_size", "parse_size"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_size(n: float) -> str:
    """``1536`` → ``1.5 KiB``; bytes below 1 KiB stay exact (``512 B``)."""
    size = float(n)
    for unit in _UNITS:
        if size < 1024 or unit == _UNITS[-1]:
            return f"{int(n)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size(text: str) -> int:
    """``1048576``, ``64MiB``, ``64M``, ``4GiB``, ``1.5GiB`` → bytes (binary units, whole bytes).

    Raises ValueError naming the text.
    """
    raw = str(text).strip()
    number = raw.rstrip("BbIiKkMmGgTtPp ")
    unit = raw[len(number) :].strip().lower().removesuffix("b").removesuffix("i")
    if unit not in _SIZE_UNITS or not number:
        raise ValueError(f"not a size: {text!r} (use e.g. 1048576, 512MiB, 4GiB)")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 1048576, 512MiB, 4GiB)") from None
    if value < 0 or value != value or value == float("inf"):
        raise ValueError(f"not a size: {text!r} (a size is positive)")
    return int(value * _SIZE_UNITS[unit])
