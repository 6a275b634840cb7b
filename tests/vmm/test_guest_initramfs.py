"""The newc writer produces archives the kernel (and GNU cpio) read as intended."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vmm.guest import initramfs as cpio

ENTRIES = [
    cpio.directory("bin"),
    cpio.regular("bin/tool", b"\x7fELF...", 0o755),
    cpio.symlink("bin/sh", "tool"),
    cpio.char_device("dev/console", 5, 1),
    cpio.regular("init", b"#!/bin/sh\n", 0o755),
]


def test_round_trip_keeps_names_modes_content_and_devices() -> None:
    assert cpio.read_newc(cpio.write_newc(ENTRIES)) == ENTRIES


def test_output_is_reproducible_and_aligned() -> None:
    a, b = cpio.write_newc(ENTRIES), cpio.write_newc(ENTRIES)
    assert a == b and len(a) % 4 == 0


@pytest.mark.integration  # runs cpio (tests/tiers.py)
@pytest.mark.skipif(shutil.which("cpio") is None, reason="GNU cpio not installed")
def test_gnu_cpio_lists_the_archive(tmp_path: Path) -> None:
    archive = tmp_path / "a.cpio"
    archive.write_bytes(cpio.write_newc(ENTRIES))
    listing = subprocess.run(
        ["cpio", "-itv"], stdin=archive.open("rb"), capture_output=True, text=True, check=True
    ).stdout
    assert "bin/sh -> tool" in listing
    assert "dev/console" in listing and "5,   1" in listing
