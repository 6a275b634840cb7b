"""forkd_client/images/debian.py: a real ``mmdebstrap`` build of ``--include python3-minimal`` from the
host's Debian archive (≈30 s, once per test session), the cached tarball, and the recorded versions.

The session's cache is shared by the tests here (the tarball is built once); the umoci comparison reuses
the tarball as a one-layer ``oci:`` layout, which is how ocibuild.layout_from_rootfs_tar serves QEMU tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from forkd_client.images import DebianSpec, build_rootfs
from forkd_client.images.apply import LayerInput, apply_layers
from forkd_client.images.build import DEBIAN_PACKAGES, DEBIAN_SUITE, DEBIAN_VARIANT
from forkd_client.images.debian import debian_inputs, installed_packages
from forkd_client.images.errors import InvalidSetting, ToolFailed
from tests.forkd_client.images.ocibuild import layout_from_rootfs_tar, tree_listing

pytestmark = [
    pytest.mark.slow,
    # One worker builds the tarball once for the whole module (under --dist loadgroup an ungrouped test may
    # land on a worker whose module fixtures never ran, and each worker would run its own ~30 s build).
    pytest.mark.xdist_group("debian-build"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mmdebstrap's root mode and the rootfs build need root"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="needs mmdebstrap (scripts/install-system-deps.sh)"),
]

SPEC = DebianSpec("bookworm", ("python3-minimal",))


@pytest.fixture(scope="module")
def debian_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("debian-cache")


@pytest.fixture(scope="module")
def built(debian_cache: Path):
    phases: list[str] = []
    result = build_rootfs(SPEC, cache_dir=debian_cache, progress=lambda phase, *_: phases.append(phase))
    assert "debootstrap" in phases
    return result


def debugfs(image: Path, request: str) -> str:
    return subprocess.run(
        ["debugfs", "-R", request, str(image)], capture_output=True, text=True, timeout=60, check=True
    ).stdout


def test_a_python_userland_with_recorded_versions(built):
    version = built.packages["python3-minimal"]
    assert version.startswith("3.11"), version
    assert built.packages["python3.11-minimal"] and built.packages["libc6"] and "dpkg" in built.packages
    assert built.annotations == {
        DEBIAN_SUITE: "bookworm",
        DEBIAN_VARIANT: "minbase",
        DEBIAN_PACKAGES: f"python3-minimal={version}",
    }
    assert built.has_shell and built.source == "debian:bookworm+python3-minimal"
    assert "python3.11" in debugfs(built.path, "stat /usr/bin/python3")  # the symlink's target
    assert "Type: regular" in debugfs(built.path, "stat /usr/bin/python3.11")
    assert '"python3-minimal": "' + version in debugfs(built.path, "cat /.forkd/image.json")
    assert any("character device /dev/null" in note for note in built.notes)


def test_the_tarball_is_cached_by_its_inputs(built, debian_cache):
    tarballs = sorted((debian_cache / "debian").glob("*.tar"))
    assert [t.name for t in tarballs] == [f"{debian_inputs(SPEC).key}.tar"]
    again = build_rootfs(SPEC, cache_dir=debian_cache)
    assert again.cache_hit and again.path == built.path
    phases: list[str] = []
    bigger = build_rootfs(SPEC, cache_dir=debian_cache, size_mib=1024, progress=lambda phase, *_: phases.append(phase))
    assert not bigger.cache_hit and bigger.size == 1024 << 20
    assert "debootstrap" not in phases  # the cached tarball was used
    assert bigger.packages == built.packages


def test_the_debian_tree_matches_umoci(built, debian_cache, tmp_path):  # built: the tarball exists
    if shutil.which("umoci") is None:
        pytest.skip("needs umoci")
    tarball = debian_cache / "debian" / f"{debian_inputs(SPEC).key}.tar"
    layout_from_rootfs_tar(tarball, tmp_path / "oci", tag="deb")
    result = subprocess.run(
        ["umoci", "raw", "unpack", "--image", f"{tmp_path / 'oci'}:deb", str(tmp_path / "ref")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    apply_layers([LayerInput(tarball)], tmp_path / "mine")
    expected = {
        p: v for p, v in tree_listing(tmp_path / "ref").items() if v["type"] != "other"
    }  # umoci makes /dev nodes
    actual = tree_listing(tmp_path / "mine")
    assert sorted(actual) == sorted(expected)
    assert [p for p in expected if actual[p] != expected[p]] == []
    assert len(actual) > 5000 and installed_packages(tmp_path / "mine")["python3-minimal"]


def test_bad_specs_and_unknown_packages(built, debian_cache):  # built: the good tarball is there first
    with pytest.raises(InvalidSetting, match="package"):
        DebianSpec("bookworm", ("Bad Name",))
    with pytest.raises(InvalidSetting, match="amd64"):
        DebianSpec("bookworm", arch="arm64")
    with pytest.raises(ToolFailed, match="forkd-no-such-package"):
        build_rootfs(DebianSpec("bookworm", ("forkd-no-such-package",)), cache_dir=debian_cache)
    assert sorted(p.name for p in (debian_cache / "debian").glob("*.tar")) == [f"{debian_inputs(SPEC).key}.tar"]
