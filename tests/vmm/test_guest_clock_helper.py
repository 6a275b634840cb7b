"""The hand-assembled forkd-clock program: a loadable static ELF that refuses anything but 16 bytes."""

from __future__ import annotations

import platform
import struct
import subprocess
from pathlib import Path

import pytest

from vmm.guest.clock_helper import clock_elf, timespec


def test_timespec_is_seconds_and_nanoseconds_little_endian() -> None:
    assert timespec(1_700_000_000_123_456_789) == struct.pack("<qq", 1_700_000_000, 123_456_789)
    assert len(timespec(0)) == 16


def test_elf_entry_point_lies_in_its_one_segment() -> None:
    elf = clock_elf()
    entry, phoff = struct.unpack_from("<QQ", elf, 24)
    p_type, p_flags, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff)
    assert (p_type, p_flags, p_offset) == (1, 5, 0)
    assert p_vaddr <= entry < p_vaddr + p_filesz == p_vaddr + len(elf)


@pytest.mark.integration  # runs the forkd-clock helper: a helper program (docs/testing.md)
@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 machine code")
@pytest.mark.parametrize("given", [b"", b"short"])
def test_exits_1_unless_given_a_whole_timespec(tmp_path: Path, given: bytes) -> None:
    """Exit 1 happens before clock_settime, so the host clock is never touched by the test."""
    exe = tmp_path / "forkd-clock"
    exe.write_bytes(clock_elf())
    exe.chmod(0o755)
    assert subprocess.run([str(exe)], input=given).returncode == 1
