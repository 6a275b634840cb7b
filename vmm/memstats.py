"""Host memory accounting for a VM process from ``/proc/<pid>/smaps_rollup`` and ``smaps``.

The whole-process numbers come from ``smaps_rollup``. The guest-RAM numbers come from the
``smaps`` entries that map the guest memory file, found by device + inode (robust against the
file being renamed after it was mapped). For a copy-on-write child, ``Private_Dirty`` of that
mapping is exactly the guest RAM it has written since the fork; ``Pss`` charges it a 1/N share of
the page-cache pages it shares with its siblings. (A page-cache page that is still dirty and
mapped by this process alone also counts as Private_Dirty; once the memory file has been written
back, the usual state of a stored snapshot, the number is exactly the copy-on-write copies.)
"""

from __future__ import annotations

import os
from pathlib import Path

from vmm.base import MemStats
from vmm.errors import VmmError


def read_mem_stats(pid: int, memory_file: Path | None) -> MemStats:
    """Memory of process ``pid``; guest-RAM fields are 0 when ``memory_file`` is not mapped.

    Raises ``VmmError`` if the process is gone or its smaps are unreadable.
    """
    try:
        rollup = _sum_fields(Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines())
        smaps = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError as exc:
        raise VmmError(f"cannot read memory maps of pid {pid}: {exc}") from exc
    guest = _sum_fields(_mapping_lines(smaps, memory_file)) if memory_file else {}
    return MemStats(
        rss=rollup.get("Rss", 0),
        pss=rollup.get("Pss", 0),
        private_dirty=rollup.get("Private_Dirty", 0),
        guest_ram_pss=guest.get("Pss", 0),
        guest_ram_private_dirty=guest.get("Private_Dirty", 0),
    )


def _mapping_lines(smaps: list[str], memory_file: Path) -> list[str]:
    """The field lines of every smaps entry whose (device, inode) is ``memory_file``'s."""
    try:
        st = os.stat(memory_file)
    except OSError:
        return []
    want_dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    selected: list[str] = []
    inside = False
    for line in smaps:
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and ":" in head[3]:  # a mapping header line
            inside = head[3] == want_dev and head[4] == str(st.st_ino)
        elif inside:
            selected.append(line)
    return selected


def _sum_fields(lines: list[str]) -> dict[str, int]:
    """Sum ``Name:   123 kB`` lines into bytes per name."""
    totals: dict[str, int] = {}
    for line in lines:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            totals[name] = totals.get(name, 0) + int(parts[0]) * 1024
    return totals
