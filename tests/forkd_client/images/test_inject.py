"""forkd_client/images/inject.py: /.forkd (injected files, env, workdir, image.json) and the shell check."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess

import pytest

from forkd_client.images.errors import InvalidSetting, ReservedPathInImage
from forkd_client.images.inject import env_file, has_posix_shell, inject_fingerprint, write_forkd_dir

ENV = [
    "PATH=/opt/x/bin:/usr/bin:/bin",
    "QUOTES=it's \"quoted\" and 'single'",
    "SPACES=  a  b  ",
    "NEWLINE=line1\nline2\n",
    "DOLLAR=$HOME and `date` and $(id)",
    "BACKSLASH=a\\b\\\\c\\n",
    "EMPTY=",
    "EQUALS=a=b=c",
    "UNICODE=héllo ✓",
    "GLOB=*",
]


@pytest.mark.integration  # runs busybox sh: a helper program (docs/testing.md)
@pytest.mark.skipif(not os.access("/bin/busybox", os.X_OK), reason="needs /bin/busybox (busybox-static)")
def test_env_round_trips_through_busybox_sh(tmp_path):
    notes: list[str] = []
    text = env_file([*ENV, "BAD-NAME=x", "NOEQUALS", "SURROGATE=\ud800"], notes.append)
    (tmp_path / "env").write_text(text)
    out = subprocess.run(
        ["/bin/busybox", "sh", "-c", ". ./env; /bin/busybox env -0"],
        cwd=tmp_path,
        env={},
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout.decode()
    seen = dict(item.split("=", 1) for item in out.split("\0") if item)
    for item in ENV:
        name, value = item.split("=", 1)
        assert seen[name] == value, name
    assert "BAD-NAME" not in seen and "SURROGATE" not in seen and len(notes) == 3


def test_write_forkd_dir_lays_out_the_reserved_directory(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    inject = {"agent": (b"#!/bin/sh\n", 0o755), "bin/busybox": (b"\x7fELF", 0o755), "lib/helper": (b"h", 0o600)}
    write_forkd_dir(
        tree,
        inject=inject,
        env=["A=1"],
        workdir="/srv/app",
        image_json={"source": "x"},
        mtime=1_700_000_000,
        note=print,
    )
    forkd = tree / ".forkd"
    assert sorted(os.listdir(forkd)) == ["agent", "bin", "env", "image.json", "lib", "workdir"]
    assert (forkd / "env").read_text() == "export A='1'\n"
    assert (forkd / "workdir").read_text() == "/srv/app\n"
    assert json.loads((forkd / "image.json").read_text()) == {"source": "x"}
    assert stat.S_IMODE(os.stat(forkd / "lib/helper").st_mode) == 0o600
    for path in (forkd, forkd / "bin", forkd / "bin/busybox", forkd / "env"):
        s = os.lstat(path)
        assert (s.st_uid, s.st_gid, s.st_mtime) == (0, 0, 1_700_000_000), path


def test_an_image_with_its_own_forkd_dir_is_refused(tmp_path):
    (tmp_path / ".forkd").mkdir()
    with pytest.raises(ReservedPathInImage, match=r"already has /\.forkd"):
        write_forkd_dir(tmp_path, inject=None, env=[], workdir=None, image_json={}, mtime=0, note=print)


@pytest.mark.parametrize("path", ["/abs", "../up", "a/../b", "", "a//b", "env", "image.json"])
def test_bad_inject_paths_are_refused(tmp_path, path):
    with pytest.raises(InvalidSetting):
        write_forkd_dir(tmp_path, inject={path: (b"", 0o644)}, env=[], workdir=None, image_json={}, mtime=0, note=print)
    assert not (tmp_path / ".forkd").exists()


def test_inject_fingerprint_covers_paths_modes_and_contents():
    base = {"a": (b"1", 0o755)}
    assert inject_fingerprint(base) == inject_fingerprint(dict(base))
    assert (
        len(
            {
                inject_fingerprint(x)
                for x in (base, {"a": (b"2", 0o755)}, {"a": (b"1", 0o644)}, {"b": (b"1", 0o755)}, None)
            }
        )
        == 5
    )


def test_has_posix_shell_follows_links_inside_the_root(tmp_path):
    tree = tmp_path / "t"
    (tree / "usr/bin").mkdir(parents=True)
    assert not has_posix_shell(tree)
    os.symlink("usr/bin", tree / "bin")
    (tree / "usr/bin/dash").write_bytes(b"\x7fELF")
    os.symlink("dash", tree / "usr/bin/sh")
    assert not has_posix_shell(tree)  # not executable yet
    os.chmod(tree / "usr/bin/dash", 0o755)
    assert has_posix_shell(tree)
    # a /bin/sh pointing outside the root is judged inside it (where nothing is)
    os.unlink(tree / "usr/bin/sh")
    os.symlink(shutil.which("sh") or "/bin/sh", tree / "usr/bin/sh")
    assert not has_posix_shell(tree)
    os.unlink(tree / "usr/bin/sh")
    os.symlink("../../../../../../bin/sh", tree / "usr/bin/sh")
    assert not has_posix_shell(tree)
