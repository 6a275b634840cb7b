"""``forkd guest build`` reuses the cached guest and reports where it is."""

from __future__ import annotations

import json
import shutil

import pytest

from forkd_client.cli.main import main
from vmm.guest.build import cached_guest

pytestmark = pytest.mark.skipif(
    shutil.which("qemu-system-x86_64") is None or shutil.which("busybox") is None,
    reason="the guest build needs busybox-static and the kernel package tools",
)


def test_guest_build_reports_the_cached_guest(capsys):
    expected = cached_guest()
    assert main(["guest", "build", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kernel_release"] == expected.kernel_release
    assert info["initrd"] == str(expected.initrd)


def test_guest_build_errors_are_clear(tmp_path, capsys):
    assert main(["guest", "build", "--out", str(tmp_path / "g"), "--kernel-root", str(tmp_path / "nothing")]) == 1
    assert "forkd: error:" in capsys.readouterr().err
