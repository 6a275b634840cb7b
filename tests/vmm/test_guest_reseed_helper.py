"""The hand-assembled forkd-reseed program is a loadable static ELF with the documented exits."""

from __future__ import annotations

import platform
import struct
import subprocess
from pathlib import Path

import pytest

from vmm.guest.reseed_helper import reseed_elf


def test_elf_header_describes_one_loadable_segment() -> None:
    elf = reseed_elf()
    assert elf[:4] == b"\x7fELF" and elf[4] == 2 and elf[5] == 1
    e_type, e_machine = struct.unpack_from("<HH", elf, 16)
    entry, phoff = struct.unpack_from("<QQ", elf, 24)
    assert (e_type, e_machine) == (2, 0x3E)
    p_type, p_flags, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff)
    assert (p_type, p_flags, p_offset) == (1, 5, 0)
    assert p_vaddr <= entry < p_vaddr + p_filesz == p_vaddr + len(elf)
    assert elf.endswith(b"/dev/urandom\0")


@pytest.mark.integration  # runs the compiled helper (tests/tiers.py)
@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 machine code")
def test_runs_and_exits_1_without_input(tmp_path: Path) -> None:
    """Exit 1 ("no entropy on stdin") happens before any ioctl, so the host RNG is untouched."""
    exe = tmp_path / "forkd-reseed"
    exe.write_bytes(reseed_elf())
    exe.chmod(0o755)
    assert subprocess.run([str(exe)], stdin=subprocess.DEVNULL).returncode == 1
