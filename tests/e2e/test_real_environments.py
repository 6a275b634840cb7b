"""Real environments end to end (issue 25): Debian's python3 baked with ``forkd from-debian`` and with
``forkd from-image`` (an ``oci:`` layout of the same userland, and that layout pushed into a hub by
skopeo), a chain built with python in the guest, children with their own numpy randomness and the
host's clock, ``--net`` installing a wheel from the host's loopback, and the chain pushed, pulled,
forked and packed like any other.

The Debian userland (python3, python3-pip, python3-numpy) is built once into a cache kept across test
runs (``~/.cache/forkd/test-rootfs``, keyed by its inputs; a fresh machine spends one mmdebstrap on it).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkd_client.cli.main import main
from forkd_client.images import build_rootfs
from forkd_client.images.build import BuiltRootfs
from forkd_client.images.cache import RootfsCache
from forkd_client.images.debian import debian_inputs
from forkd_client.images.provenance import BASE_DIGEST, BASE_NAME, DEBIAN_PACKAGES, DEBIAN_SUITE
from forkd_client.store import SnapshotStore
from tests.e2e.hubproc import HubProcess
from tests.e2e.realenv import INCLUDE, SPEC, pip_install, rootfs_cache_env, wheel_index
from tests.forkd_client.images.ocibuild import LayoutInfo, layout_from_rootfs_tar
from tests.forkd_client.vmfixtures import QEMU, no_vm_left_running  # noqa: F401  (autouse)
from tests.forkd_daemon import assert_forkd_sees_every_link
from vmm.testing import file_sha256

pytestmark = [
    pytest.mark.slow,
    pytest.mark.qemu,
    pytest.mark.skipif(shutil.which(QEMU) is None, reason=f"{QEMU} is not installed"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="needs mmdebstrap (scripts/install-system-deps.sh)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="building a root filesystem keeps file ownership: needs root"),
]

NUMPY_RANDOM = "python3 -c 'import numpy; print(numpy.random.default_rng().integers(1 << 62))'"
MEM = "384"


def cli(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *argv])
    return code, out.getvalue(), err.getvalue()


def ok(home: Path, *argv: str) -> str:
    code, out, err = cli(home, *argv)
    assert code == 0, f"forkd {' '.join(argv)} exited {code}:\n{out}\n{err}"
    return out


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Logins go to this test's own config dir, never the user's."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture(scope="module")
def rootfs_cache() -> Iterator[Path]:
    """The test rootfs cache, kept across runs, exported so the CLI builds into it too."""
    with rootfs_cache_env() as cache:
        yield cache


@pytest.fixture(scope="module")
def debian(rootfs_cache: Path) -> BuiltRootfs:
    return build_rootfs(SPEC, cache_dir=rootfs_cache)


@pytest.fixture(scope="module")
def layout(
    debian: BuiltRootfs, rootfs_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, LayoutInfo]:
    """The same userland as a one-layer OCI image, with an Env and a WorkingDir of its own."""
    tarball = RootfsCache(rootfs_cache).debian_tarball(debian_inputs(SPEC).key)
    root = tmp_path_factory.mktemp("layout")
    info = layout_from_rootfs_tar(
        tarball,
        root,
        tag="py",
        env=["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=from the image config"],
        workdir="/srv",
    )
    return root, info


@pytest.fixture(scope="module")
def base(debian: BuiltRootfs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with ``py-base`` baked by ``forkd from-debian`` (its rootfs from the cache)."""
    home = tmp_path_factory.mktemp("home")
    out = ok(home, "from-debian", "--include", INCLUDE, "--tag", "py-base", "--mem-mib", MEM, "--json",
             "--exec", "python3 -c 'import sys; print(sys.version_info[:2])'")  # fmt: skip
    result = json.loads(out)
    assert result["exec"]["output"] == "(3, 11)\n"
    assert result["rootfs"]["cache_hit"] and result["rootfs"]["path"] == str(debian.path)
    return home


def test_from_debian_records_the_suite_and_versions_and_boots_python(base: Path, debian: BuiltRootfs) -> None:
    with SnapshotStore(base) as store:
        snap = store.get("py-base")
    assert snap.annotations[DEBIAN_SUITE] == "bookworm"
    packages = dict(p.split("=", 1) for p in snap.annotations[DEBIAN_PACKAGES].split(","))
    assert set(packages) == set(SPEC.packages)
    assert packages["python3-numpy"] == debian.packages["python3-numpy"]
    assert snap.compat["deviceIds"] == "rootfs,net0"
    assert (snap.dir / "rootfs.ext4").is_file()
    text = ok(base, "inspect", "py-base")
    assert f"Built from:          Debian bookworm (minbase): {snap.annotations[DEBIAN_PACKAGES]}" in text


def test_a_python_chain_forks_children_with_their_own_numpy_randomness_and_the_hosts_clock(
    base: Path, tmp_path: Path
) -> None:
    ok(base, "snapshot-diff", "--from", "py-base", "--tag", "py-app", "--exec",
       "python3 -c \"import numpy; numpy.save('/root/weights.npy', numpy.arange(12.0))\"")  # fmt: skip
    baked = time.time()
    # forkd's daemon would assemble the same memory for every link
    assert_forkd_sees_every_link(base / "snapshots", ["py-base", "py-app"], tmp_path)
    time.sleep(8)  # a restored guest's clock lags by the time since the bake unless the fork sets it
    out = ok(base, "fork", "py-app", "-n", "3", "--json", "--exec",
             f"python3 -c 'import numpy; print(numpy.load(\"/root/weights.npy\").sum())'; {NUMPY_RANDOM}; date +%s")  # fmt: skip
    forked = time.time()
    children = json.loads(out)["children"]
    numbers = set()
    for child in children:
        weights, number, clock = child["output"].split()
        assert weights == "66.0"  # the link's file, on the link's disk
        numbers.add(number)
        assert forked - baked > 8
        assert baked + 7 <= int(clock) <= forked + 2, "the child's clock is the host's, not the bake's"
    assert len(numbers) == 3, f"each child draws its own numbers: {numbers}"


def test_from_image_of_an_oci_layout_runs_steps_with_the_image_config(
    layout: tuple[Path, LayoutInfo], tmp_path: Path
) -> None:
    root, info = layout
    home = tmp_path / "home"
    out = ok(home, "from-image", f"oci:{root}:py", "--tag", "img", "--mem-mib", MEM, "--json",
             "--exec", 'echo "$GREETING in $(pwd)"', "--exec", "python3 -c 'print(6 * 7)'")  # fmt: skip
    result = json.loads(out)
    assert result["exec"]["output"] == "from the image config in /srv\n42\n"
    assert result["annotations"][BASE_DIGEST] == info.manifest_digest
    assert result["annotations"][BASE_NAME] == f"oci:{root}:py"
    assert result["annotations"]["dev.forkd.exec"] == 'echo "$GREETING in $(pwd)"\n' + "python3 -c 'print(6 * 7)'"


def test_from_image_of_a_hub_repository_pushed_by_skopeo(
    layout: tuple[Path, LayoutInfo], tmp_path: Path, rootfs_cache: Path
) -> None:
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed (scripts/install-system-deps.sh)")
    root, info = layout
    hub = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    try:
        token = hub.token("ci", "push:acme/*")
        host = f"127.0.0.1:{hub.port}"
        subprocess.run(
            ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--dest-creds", f"ci:{token}",
             f"oci:{root}:py", f"docker://{host}/acme/python:3.11"],
            check=True, timeout=300,
        )  # fmt: skip
        home = tmp_path / "home"
        ok(home, "login", hub.url, "--token", token)
        out = ok(home, "from-image", f"{host}/acme/python:3.11", "--tag", "hubimg", "--mem-mib", MEM,
                 "--json", "--exec", "python3 -c 'import numpy; print(numpy.__name__)'")  # fmt: skip
    finally:
        hub.stop()
    result = json.loads(out)
    assert result["exec"]["output"] == "numpy\n"
    # skopeo kept the manifest's bytes: the same digest, so the rootfs came out of the cache
    assert result["annotations"][BASE_DIGEST] == info.manifest_digest
    assert result["annotations"][BASE_NAME] == f"{host}/acme/python:3.11"


@pytest.fixture
def probe_index(tmp_path: Path) -> Iterator[int]:
    with wheel_index(tmp_path / "wheels", "forkdprobe", "VALUE = 'installed over --net'\n") as port:
        yield port


def test_net_lets_pip_reach_a_wheel_index_on_the_hosts_loopback(base: Path, probe_index: int) -> None:
    pip = pip_install(probe_index, "forkdprobe")
    code, _, err = cli(base, "snapshot-diff", "--from", "py-base", "--tag", "py-offline", "--exec", pip)
    assert code == 1 and "No matching distribution found for forkdprobe" in err, "no --net, no network"
    ok(base, "snapshot-diff", "--from", "py-base", "--tag", "py-probe", "--net", "--exec", pip)
    out = ok(base, "fork", "py-probe", "--json", "--exec", "python3 -c 'import forkdprobe; print(forkdprobe.VALUE)'")
    assert json.loads(out)["children"][0]["output"] == "installed over --net\n"


def test_the_chain_travels_push_pull_fork_and_pack(base: Path, tmp_path: Path) -> None:
    ok(base, "snapshot-diff", "--from", "py-base", "--tag", "py-travel", "--exec", "echo travelled > /root/t")
    hub = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    try:
        token = hub.token("ci", "push:acme/*")
        ok(base, "login", hub.url, "--token", token)
        ref = f"127.0.0.1:{hub.port}/acme/python:travel"
        pushed = json.loads(ok(base, "push", "py-travel", ref, "--json"))
        home = tmp_path / "elsewhere"
        pulled = json.loads(ok(home, "pull", ref, "--as", "py-travel", "--json"))
    finally:
        hub.stop()
    assert pushed["digest"] == pulled["digest"]
    with SnapshotStore(base) as here, SnapshotStore(home) as there:
        for tag in ("py-base", "py-travel"):
            for role in ("rootfs.ext4", "memory.bin"):
                assert file_sha256(there.get(tag).dir / role) == file_sha256(here.get(tag).dir / role), (tag, role)
    out = ok(home, "fork", "py-travel", "--json", "--exec", "cat /root/t; python3 -c 'print(1)'")
    assert json.loads(out)["children"][0]["output"] == "travelled\n1\n"
    # a forkd pack: the head's disk travels as forkd's rootfs sidecar beside it, and forkd's unpack
    # semantics give every link the memory it had here and the head its disk
    pack = tmp_path / "py.forkd-snapshot.tar.zst"
    ok(home, "pack", "py-travel", "-o", str(pack))
    sidecars = list(tmp_path.glob("*.rootfs.zst"))
    assert len(sidecars) == 1
    unpacked = tmp_path / "unpacked"
    ok(unpacked, "unpack", str(pack))  # a chain pack: its links keep their tags
    assert_forkd_sees_every_link(unpacked / "snapshots", ["py-base", "py-travel"], tmp_path / "forkd")
    head = json.loads((unpacked / "snapshots" / "py-travel" / "snapshot.json").read_text())
    disk = Path(head["rootfs"]) if "rootfs" in head else unpacked / "snapshots" / "py-travel" / "rootfs.ext4"
    with SnapshotStore(home) as there:
        assert file_sha256(disk) == file_sha256(there.get("py-travel").dir / "rootfs.ext4")
