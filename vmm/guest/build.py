"""Building the test guest: Debian cloud kernel + busybox initramfs with the forkd agent as /init.

Layout of the cache (``$FORKD_GUEST_CACHE``, default ``$XDG_CACHE_HOME/forkd/guest``)::

    kernel/linux-image-<ver>-cloud-amd64_<debver>_amd64.deb   apt-get download
    kernel/linux-image-<ver>-cloud-amd64/                    dpkg -x of it
    image/vmlinuz  image/initrd.cpio  image/rootfs.ext4  image/guest.json

``guest.json`` is written last; a build is reused while it exists, its files exist and its
fingerprint (agent script, reseed helper, busybox binary, module list, command line) matches.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vmm.base import BootSpec
from vmm.errors import GuestBuildError
from vmm.guest import initramfs as cpio
from vmm.guest.agent import AGENT_VERSION, INIT_SCRIPT, ROOTFS_AGENT
from vmm.guest.clock_helper import clock_elf
from vmm.guest.kernel import GUEST_MODULES, KernelTree, fetch_kernel, open_kernel_tree
from vmm.guest.reseed_helper import reseed_elf

BUSYBOX = Path("/bin/busybox")
CMDLINE = "console=ttyS0 reboot=t panic=-1 quiet rdinit=/init"
GUEST_FILE = "guest.json"
ROOTFS_MARKER = "forkd-rootfs"
#: kernel command line argument naming the disk the init boots as the root filesystem
ROOT_ARG = "forkd.root"


@dataclass(frozen=True)
class GuestImage:
    """A bootable guest: kernel, initramfs, command line and a small ext4 data disk (if built)."""

    directory: Path
    kernel: Path
    initrd: Path
    cmdline: str
    kernel_release: str
    rootfs: Path | None = None

    def boot_spec(self, work_dir: Path, mem_mib: int = 256, vcpus: int = 1, rootfs: Path | None = None) -> BootSpec:
        """A ``BootSpec`` for this guest; pass ``rootfs`` (e.g. a copy of ``self.rootfs``) for a disk."""
        return BootSpec(
            kernel=self.kernel,
            initrd=self.initrd,
            cmdline=self.cmdline,
            work_dir=Path(work_dir),
            rootfs=rootfs,
            mem_mib=mem_mib,
            vcpus=vcpus,
        )

    def root_boot_spec(
        self, work_dir: Path, rootfs: Path, mem_mib: int = 512, vcpus: int = 1, network: bool = False
    ) -> BootSpec:
        """A ``BootSpec`` that boots ``rootfs`` (an ext4 image the VM may write: pass a copy) as the
        root filesystem, with the agent handed over to it and a NIC (isolated unless ``network``)."""
        return BootSpec(
            kernel=self.kernel,
            initrd=self.initrd,
            cmdline=f"{self.cmdline} {ROOT_ARG}=/dev/vda",
            work_dir=Path(work_dir),
            rootfs=rootfs,
            mem_mib=mem_mib,
            vcpus=vcpus,
            nic=True,
            network=network,
        )


def default_cache_dir() -> Path:
    """``$FORKD_GUEST_CACHE``, else ``$XDG_CACHE_HOME/forkd/guest``, else ``~/.cache/forkd/guest``."""
    if os.environ.get("FORKD_GUEST_CACHE"):
        return Path(os.environ["FORKD_GUEST_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forkd" / "guest"


def cached_guest(force: bool = False) -> GuestImage:
    """The guest in the default cache, built on first use. Raises ``GuestBuildError``."""
    return build_guest(default_cache_dir() / "image", force=force)


def build_guest(out_dir: Path, kernel_root: Path | None = None, force: bool = False) -> GuestImage:
    """Build (or reuse) the guest in ``out_dir``.

    ``kernel_root`` is an unpacked kernel package (``dpkg -x`` output); by default the current
    cloud kernel is downloaded into ``<cache>/kernel``. Raises ``GuestBuildError``.
    """
    out_dir = Path(out_dir)
    fingerprint = _fingerprint()
    if not force:
        existing = _load(out_dir, fingerprint)
        if existing and (kernel_root is None or existing.kernel_release == open_kernel_tree(kernel_root).release):
            return existing
    tree = open_kernel_tree(kernel_root) if kernel_root else fetch_kernel(default_cache_dir() / "kernel")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / GUEST_FILE).unlink(missing_ok=True)
    shutil.copyfile(tree.vmlinuz, out_dir / "vmlinuz")
    (out_dir / "initrd.cpio").write_bytes(cpio.write_newc(_initramfs_entries(tree)))
    rootfs = _make_rootfs(out_dir / "rootfs.ext4")
    record = {
        "fingerprint": fingerprint,
        "kernel_release": tree.release,
        "cmdline": CMDLINE,
        "rootfs": rootfs.name if rootfs else None,
    }
    tmp = out_dir / (GUEST_FILE + ".partial")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out_dir / GUEST_FILE)
    image = _load(out_dir, fingerprint)
    assert image is not None
    return image


def _load(out_dir: Path, fingerprint: str) -> GuestImage | None:
    try:
        record = json.loads((out_dir / GUEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    image = GuestImage(
        directory=out_dir,
        kernel=out_dir / "vmlinuz",
        initrd=out_dir / "initrd.cpio",
        cmdline=record.get("cmdline", CMDLINE),
        kernel_release=record.get("kernel_release", ""),
        rootfs=out_dir / record["rootfs"] if record.get("rootfs") else None,
    )
    files = [image.kernel, image.initrd] + ([image.rootfs] if image.rootfs else [])
    if record.get("fingerprint") != fingerprint or not all(p.is_file() for p in files):
        return None
    return image


def _fingerprint() -> str:
    h = hashlib.sha256()
    for part in (
        str(AGENT_VERSION).encode(),
        INIT_SCRIPT.encode(),
        ROOTFS_AGENT.encode(),
        reseed_elf(),
        clock_elf(),
        CMDLINE.encode(),
        " ".join(GUEST_MODULES).encode(),
        _busybox_bytes(),
    ):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def _busybox_bytes() -> bytes:
    try:
        data = BUSYBOX.read_bytes()
    except OSError as exc:
        raise GuestBuildError(f"{BUSYBOX} is missing (install busybox-static): {exc}") from exc
    if _has_interpreter(data):
        raise GuestBuildError(f"{BUSYBOX} is dynamically linked; install busybox-static")
    return data


def _has_interpreter(elf: bytes) -> bool:
    """True if an ELF64 file has a PT_INTERP segment (i.e. needs a dynamic loader)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2:
        return True
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    return any(struct.unpack_from("<I", elf, phoff + i * phentsize)[0] == 3 for i in range(phnum))


def _module_order(tree: KernelTree) -> list[tuple[str, Path]]:
    """GUEST_MODULES plus their ``depends=`` closure, dependencies first."""
    order: list[tuple[str, Path]] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        path = tree.module(name)
        for dep in _modinfo_depends(path.read_bytes()):
            visit(dep)
        order.append((name, path))

    for name in GUEST_MODULES:
        visit(name)
    return order


def _modinfo_depends(ko: bytes) -> list[str]:
    """The ``depends=`` list from a module's .modinfo strings (no modinfo binary needed)."""
    start = ko.find(b"\0depends=")
    if start < 0:
        return []
    value = ko[start + len(b"\0depends=") : ko.index(b"\0", start + 1)].decode()
    return [d.replace("-", "_") for d in value.split(",") if d]


def _initramfs_entries(tree: KernelTree) -> list[cpio.Entry]:
    modules = _module_order(tree)
    entries = [
        cpio.directory(d)
        for d in ("bin", "sbin", "dev", "etc", "lib", "lib/modules", "mnt", "proc", "root", "run", "sys", "tmp", "usr")
    ]
    entries += [
        cpio.char_device("dev/console", 5, 1),
        cpio.char_device("dev/null", 1, 3, 0o666),
        cpio.regular("bin/busybox", _busybox_bytes(), 0o755),
        cpio.symlink("bin/sh", "busybox"),
        cpio.regular("bin/forkd-reseed", reseed_elf(), 0o755),
        cpio.regular("bin/forkd-clock", clock_elf(), 0o755),
        cpio.regular("init", INIT_SCRIPT.encode(), 0o755),
        cpio.regular("forkd-agent", ROOTFS_AGENT.encode(), 0o755),
        cpio.regular("etc/hostname", b"forkd-guest\n"),
        cpio.regular("lib/modules/load-order", "".join(f"{n}\n" for n, _ in modules).encode()),
    ]
    entries += [cpio.regular(f"lib/modules/{name}.ko", path.read_bytes()) for name, path in modules]
    return entries


def _make_rootfs(path: Path, size_mib: int = 16) -> Path | None:
    """A small ext4 data disk holding a marker file, or None when mkfs.ext4 is unavailable."""
    mkfs = shutil.which("mkfs.ext4") or shutil.which("mkfs.ext4", path="/sbin:/usr/sbin")
    if not mkfs:
        return None
    with tempfile.TemporaryDirectory() as content:
        Path(content, ROOTFS_MARKER).write_text("forkd guest data disk\n")
        path.unlink(missing_ok=True)
        with open(path, "wb") as f:
            f.truncate(size_mib << 20)
        proc = subprocess.run(
            [mkfs, "-q", "-F", "-E", "root_owner=0:0", "-d", content, str(path)], capture_output=True, text=True
        )
    if proc.returncode != 0:
        raise GuestBuildError(f"mkfs.ext4 failed: {proc.stderr.strip()[-300:]}")
    return path
