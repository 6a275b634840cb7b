"""Real QEMU guests that boot an ext4 image as their root filesystem (``GuestImage.root_boot_spec``):
the agent handed over to the image, the image's environment, a NIC isolated unless asked, the
wall clock set on every restore, and children writing to throwaway overlays of the snapshot's disk."""

from __future__ import annotations

import http.server
import shutil
import socketserver
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from manifest.fileops import clone_file
from vmm.base import NIC_DEVICE, ROOTFS_DEVICE
from vmm.errors import BootFailed, RestoreFailed
from vmm.guest import GuestImage
from vmm.qemu import QemuMicrovmDriver
from vmm.testing import file_sha256

pytestmark = [pytest.mark.qemu, pytest.mark.slow]
MEM_MIB = 128
DAY_NS = 86_400 * 10**9
APPLETS = ("sh", "cat", "echo", "env", "pwd", "id", "nc", "printf", "date", "ls", "sync", "tail", "test", "rm")


def make_rootfs(path: Path, *, shell: bool = True, workdir: str = "/srv/app") -> Path:
    """A tiny image: static busybox as /bin/sh and friends, an /.forkd/env and workdir as
    forkd_client.images writes them, a marker file."""
    tree = path.with_suffix(".tree")
    (tree / "bin").mkdir(parents=True)
    (tree / "etc").mkdir()
    (tree / ".forkd").mkdir()
    (tree / workdir.lstrip("/")).mkdir(parents=True)
    (tree / "etc" / "marker").write_text("from the image\n")
    if shell:
        shutil.copy2("/bin/busybox", tree / "bin" / "busybox")
        for applet in APPLETS:
            (tree / "bin" / applet).symlink_to("busybox")
    (tree / ".forkd" / "env").write_text(
        "export PATH='/bin'\nexport GREETING='it'\"'\"'s a $HOME with spaces'\nexport LANG='C.UTF-8'\n"
    )
    (tree / ".forkd" / "workdir").write_text(workdir + "\n")
    with open(path, "wb") as f:
        f.truncate(32 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), str(path)], check=True)
    shutil.rmtree(tree)
    return path


@pytest.fixture(scope="module")
def qemu(guest: GuestImage) -> QemuMicrovmDriver:
    driver = QemuMicrovmDriver(clock=lambda: time.time_ns() + DAY_NS)  # children wake up "a day later"
    status = driver.available()
    if not status.ok:
        pytest.skip(f"QEMU unusable: {status.reason}")
    return driver


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_rootfs(tmp_path_factory.mktemp("img") / "root.ext4")


@pytest.fixture
def loopback_server(tmp_path: Path) -> Iterator[int]:
    """An HTTP server on the host's 127.0.0.1 (the guest reaches it as 10.0.2.2)."""
    (tmp_path / "hello.txt").write_text("hello from the host\n")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args: object) -> None:
            pass

    with socketserver.TCPServer(("127.0.0.1", 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server.server_address[1]
        server.shutdown()


def boot(qemu: QemuMicrovmDriver, guest: GuestImage, image: Path, work: Path, network: bool = False):  # type: ignore[no-untyped-def]
    disk = work / "rootfs.ext4"
    work.mkdir(parents=True, exist_ok=True)
    clone_file(image, disk)
    return qemu.boot(guest.root_boot_spec(work, disk, mem_mib=MEM_MIB, network=network))


def test_the_image_is_the_root_and_commands_get_its_environment(
    qemu: QemuMicrovmDriver, guest: GuestImage, image: Path, tmp_path: Path
) -> None:
    image_hash = file_sha256(image)
    vm = boot(qemu, guest, image, tmp_path / "vm")
    try:
        assert vm.compat.device_ids == (ROOTFS_DEVICE, NIC_DEVICE)
        assert vm.run("cat /etc/marker", check=True).output == "from the image\n"
        assert vm.run("pwd", check=True).output == "/srv/app\n"
        assert vm.run('echo "$GREETING"', check=True).output == "it's a $HOME with spaces\n"
        env = dict(line.split("=", 1) for line in vm.run("env", check=True).output.splitlines() if "=" in line)
        assert env["PATH"] == "/bin" and env["LANG"] == "C.UTF-8" and env["HOME"] == "/root"
        assert vm.run("id", check=True).output.startswith("uid=0 ")  # root (the image has no passwd)
        # the agent lives in a tmpfs, not in the image
        assert vm.run("ls /run/forkd", check=True).output.split() == [
            "agent",
            "busybox",
            "forkd-agent",
            "forkd-clock",
            "forkd-reseed",
        ]
    finally:
        vm.kill()
    assert file_sha256(image) == image_hash, "the VM writes its own copy, never the image"


def test_an_image_without_a_shell_boots_and_says_why_commands_fail(
    qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path
) -> None:
    image = make_rootfs(tmp_path / "noshell.ext4", shell=False)
    vm = boot(qemu, guest, image, tmp_path / "vm")
    try:
        result = vm.run("true")
        assert result.exit_code == 126
        assert "this image has no /bin/sh" in result.output
    finally:
        vm.kill()


def test_a_disk_that_is_not_ext4_fails_the_boot_at_once(
    qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path
) -> None:
    disk = tmp_path / "vm" / "rootfs.ext4"
    disk.parent.mkdir()
    disk.write_bytes(b"not a filesystem" * 65536)
    started = time.monotonic()
    with pytest.raises(BootFailed, match="cannot mount the root filesystem /dev/vda as ext4"):
        qemu.boot(guest.root_boot_spec(tmp_path / "vm", disk, mem_mib=MEM_MIB))
    # answered by the init's fatal line, not by the 90 s agent timeout
    assert time.monotonic() - started < guest.root_boot_spec(tmp_path, disk).boot_timeout


def test_children_write_to_overlays_and_wake_up_with_the_hosts_clock(
    qemu: QemuMicrovmDriver, guest: GuestImage, image: Path, tmp_path: Path
) -> None:
    vm = boot(qemu, guest, image, tmp_path / "vm")
    vm.run("echo baked > /etc/baked && sync", check=True)
    baked_at = int(vm.run("date +%s", check=True).output)
    snap = qemu.snapshot(vm, tmp_path / "snap")
    assert snap.rootfs == tmp_path / "snap" / "rootfs.ext4"
    assert not (tmp_path / "vm" / "rootfs.ext4").exists(), "the VM's own disk is moved, not copied"
    disk_hash = file_sha256(snap.rootfs)

    children = qemu.fork(snap, 2)
    try:
        for i, child in enumerate(children):
            assert child.run("cat /etc/baked", check=True).output == "baked\n"
            child.run(f"echo child-{i} > /etc/mine && sync", check=True)
        for i, child in enumerate(children):
            assert child.run("cat /etc/mine", check=True).output == f"child-{i}\n"
            # the driver's clock is a day ahead: a child's wall clock is the host's at its restore
            woke = int(child.run("date +%s", check=True).output)
            assert woke - baked_at >= DAY_NS // 10**9 - 60
        work_dirs = [child.work_dir for child in children]
    finally:
        for child in children:
            child.kill()
    assert file_sha256(snap.rootfs) == disk_hash, "children never write the snapshot's disk"
    assert not any(d.exists() for d in work_dirs), "a killed child leaves no overlay behind"


def test_the_nic_is_isolated_unless_network_is_asked_for(
    qemu: QemuMicrovmDriver, guest: GuestImage, image: Path, tmp_path: Path, loopback_server: int
) -> None:
    # busybox-static's wget crashes in its resolver; nc with a numeric address does not resolve
    fetch = f"printf 'GET /hello.txt HTTP/1.0\\r\\n\\r\\n' | nc -w 5 10.0.2.2 {loopback_server} | tail -n 1"
    vm = boot(qemu, guest, image, tmp_path / "vm", network=True)
    try:
        assert vm.run(fetch, timeout=30, check=True).output == "hello from the host\n"
    except BaseException:
        vm.kill()
        raise
    snap = qemu.snapshot(vm, tmp_path / "snap")
    (isolated,) = qemu.fork(snap, 1)
    try:
        assert "Connection refused" in isolated.run(fetch, timeout=30).output
    finally:
        isolated.kill()
    (online,) = qemu.fork(snap, 1, network=True)
    try:
        assert online.run(fetch, timeout=30, check=True).output == "hello from the host\n"
    finally:
        online.kill()


def test_network_needs_a_snapshot_with_a_nic(qemu: QemuMicrovmDriver, guest: GuestImage, tmp_path: Path) -> None:
    vm = qemu.boot(guest.boot_spec(tmp_path / "vm", mem_mib=MEM_MIB))
    snap = qemu.snapshot(vm, tmp_path / "snap")
    with pytest.raises(RestoreFailed, match="has no network device"):
        qemu.fork(snap, 1, network=True)
