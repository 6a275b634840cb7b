"""smaps accounting: whole-process numbers and the guest-RAM mapping found by inode."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from vmm.errors import VmmError
from vmm.memstats import read_mem_stats

MIB = 1 << 20


def test_private_file_mapping_counts_only_written_pages(tmp_path: Path) -> None:
    path = tmp_path / "memory.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(8 * MIB))
        f.flush()
        os.fsync(f.fileno())  # clean page cache, like a stored snapshot
    fd = os.open(path, os.O_RDONLY)
    ram = mmap.mmap(fd, 8 * MIB, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(fd)
    try:
        _ = sum(ram[i] for i in range(0, 8 * MIB, 4096))  # read every page: shared, clean
        clean = read_mem_stats(os.getpid(), path)
        for i in range(0, 2 * MIB, 4096):  # write 2 MiB: copy-on-write private pages
            ram[i] = 1
        dirty = read_mem_stats(os.getpid(), path)
    finally:
        ram.close()
    assert clean.guest_ram_private_dirty < 256 * 1024
    assert 2 * MIB <= dirty.guest_ram_private_dirty < 3 * MIB
    assert dirty.guest_ram_pss >= 2 * MIB
    assert dirty.rss >= dirty.pss > 0 and dirty.private_dirty >= dirty.guest_ram_private_dirty


def test_unmapped_or_missing_file_counts_zero(tmp_path: Path) -> None:
    stats = read_mem_stats(os.getpid(), tmp_path / "nothing")
    assert stats.guest_ram_pss == 0 and stats.rss > 0
    assert read_mem_stats(os.getpid(), None).guest_ram_private_dirty == 0


def test_a_missing_process_raises() -> None:
    with pytest.raises(VmmError, match="pid"):
        read_mem_stats(2**22 + 12345, None)
