"""``forkd from-image`` / ``from-debian`` refusals through the CLI: each exits with its class's code, names
what was wrong, prints no traceback and installs nothing. None of them reaches a VM (they fail before it
boots), so they need no QEMU; the ones that build a root filesystem need root (file owners are kept)."""

from __future__ import annotations

import contextlib
import io
import os
import socket
from pathlib import Path

import pytest

from forkd_client.cli.bake import condense_notes
from forkd_client.cli.main import main
from forkd_client.store import SnapshotStore
from tests.forkd_client.images.ocibuild import Entry, layer_tar, write_layout

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="building a root filesystem keeps file owners: needs root")


def cli(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def rootfs_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "rootfs-cache"
    monkeypatch.setenv("FORKD_ROOTFS_CACHE", str(cache))
    return cache


def nothing_installed(home: Path, cache: Path) -> bool:
    with SnapshotStore(home) as store:
        tags = store.tags()
    cached = list((cache / "images").glob("*/rootfs.ext4")) if (cache / "images").exists() else []
    return tags == [] and cached == []


@needs_root
def test_a_hostile_layer_is_refused_naming_the_entry(home: Path, tmp_path: Path, rootfs_cache: Path) -> None:
    layer = layer_tar([Entry.file("etc/ok", b"fine"), Entry.file("../../etc/evil", b"pwned")])
    write_layout(tmp_path / "evil", [layer], tag="v1")
    code, _, err = cli(home, "from-image", f"oci:{tmp_path / 'evil'}:v1", "--tag", "evil")
    assert code == 1
    assert "../../etc/evil" in err and "Traceback" not in err
    assert nothing_installed(home, rootfs_cache)


@pytest.mark.integration  # builds its image with mkfs.ext4: a helper program (docs/testing.md)
@needs_root
def test_exec_needs_a_shell_in_the_image(home: Path, tmp_path: Path, rootfs_cache: Path) -> None:
    write_layout(tmp_path / "noshell", [layer_tar([Entry.file("app/data", b"x")])], tag="v1")
    code, _, err = cli(home, "from-image", f"oci:{tmp_path / 'noshell'}:v1", "--tag", "t", "--exec", "true")
    assert code == 2
    assert "has no POSIX shell at /bin/sh, so --exec cannot run in it" in err
    with SnapshotStore(home) as store:
        assert store.tags() == []  # refused before the VM: the (valid) root filesystem stays cached


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["from-image", "oci:"], "oci:"),
        (["from-image", "HTTP://Bad Host/x"], "Bad Host"),
        (["from-debian", "--suite", "bookworm;rm", "--include", "python3"], "invalid Debian suite"),
        (["from-debian", "--include", "python3,no such package"], "invalid Debian package name"),
    ],
)
def test_malformed_input_is_a_usage_error(home: Path, rootfs_cache: Path, argv: list[str], message: str) -> None:
    code, _, err = cli(home, *argv, "--tag", "t")
    assert code == 2 and message in err and "Traceback" not in err
    assert nothing_installed(home, rootfs_cache)


def test_an_unreachable_registry_is_a_network_error(home: Path, rootfs_cache: Path) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = cli(home, "from-image", f"127.0.0.1:{port}/library/python:3.12", "--tag", "t")
    assert code == 5 and f"127.0.0.1:{port}" in err
    assert nothing_installed(home, rootfs_cache)


def test_a_taken_tag_is_refused_before_anything_is_built(home: Path, rootfs_cache: Path, tmp_path: Path) -> None:
    from .snapshots import make_base_source

    assert main(["--home", str(home), "import", str(make_base_source(tmp_path / "b")), "taken"]) == 0
    code, _, err = cli(home, "from-debian", "--include", "python3", "--tag", "taken")
    assert code == 4 and "taken" in err
    assert not (rootfs_cache / "debian").exists(), "nothing was bootstrapped for a tag that cannot be used"


def test_device_nodes_under_dev_are_one_note() -> None:
    notes = [f"skipped character device /dev/{n} (layer 0)" for n in ("null", "zero", "tty")]
    notes.append("skipped fifo /srv/pipe (layer 1)")
    assert condense_notes(notes) == [
        "skipped 3 device nodes under /dev (null, zero, tty): the guest's devtmpfs provides them",
        "skipped fifo /srv/pipe (layer 1)",
    ]
    assert condense_notes(notes[:1]) == notes[:1]
