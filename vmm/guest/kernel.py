"""Fetching the Debian cloud kernel and the guest modules out of its package.

The kernel package name moves with every Debian kernel update (``linux-image-6.1.0-57-cloud-amd64``
today), so it is resolved through the ``linux-image-cloud-amd64`` metapackage each time and never
pinned. The ``.deb`` is fetched with ``apt-get download`` and unpacked with ``dpkg -x``; both are
skipped when the cache already holds them.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vmm.errors import GuestBuildError

METAPACKAGE = "linux-image-cloud-amd64"

# Loaded in this order by the guest init. virtio-mmio finds microvm's devices through ACPI (the
# cloud kernel lacks VIRTIO_MMIO_CMDLINE_DEVICES); virtio_rng lets a VMM offer a hardware RNG;
# virtio_net drives the NIC of root-filesystem guests (ext4 itself is built into the kernel).
GUEST_MODULES = ("virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_net", "virtio_rng")
_MODULE_FILES = {"virtio-rng": "virtio_rng"}  # file name → module name where they differ


@dataclass(frozen=True)
class KernelTree:
    """An unpacked kernel package: its bzImage, release string and module directory."""

    root: Path
    vmlinuz: Path
    release: str

    @property
    def modules_dir(self) -> Path:
        return self.root / "lib" / "modules" / self.release

    def module(self, name: str) -> Path:
        """Path of module ``name`` (``virtio_rng`` finds ``virtio-rng.ko``). Raises ``GuestBuildError``."""
        for path in self.modules_dir.rglob("*.ko"):
            if _MODULE_FILES.get(path.stem, path.stem) == name:
                return path
        raise GuestBuildError(f"kernel module {name} not found under {self.modules_dir}")


def open_kernel_tree(root: Path) -> KernelTree:
    """Find the one ``boot/vmlinuz-*`` in an unpacked package. Raises ``GuestBuildError``."""
    images = sorted(Path(root).glob("boot/vmlinuz-*"))
    if len(images) != 1:
        raise GuestBuildError(f"expected exactly one boot/vmlinuz-* under {root}, found {len(images)}")
    return KernelTree(Path(root), images[0], images[0].name.removeprefix("vmlinuz-"))


def resolve_kernel_package() -> str:
    """The concrete package ``linux-image-cloud-amd64`` depends on. Raises ``GuestBuildError``."""
    out = _run(["apt-cache", "depends", METAPACKAGE])
    match = re.search(r"Depends:\s*(linux-image-\S+)", out)
    if not match:
        raise GuestBuildError(
            f"apt-cache knows no dependency of {METAPACKAGE} (run `apt-get update` first?): {out.strip()[:300]}"
        )
    return match.group(1)


def fetch_kernel(cache_dir: Path) -> KernelTree:
    """Download (if absent) and unpack (if absent) the current cloud kernel under ``cache_dir``."""
    package = resolve_kernel_package()
    cache_dir.mkdir(parents=True, exist_ok=True)
    root = cache_dir / package
    if (root / "boot").is_dir():
        return open_kernel_tree(root)
    debs = sorted(cache_dir.glob(f"{package}_*.deb"))
    if not debs:
        _run(["apt-get", "download", package], cwd=cache_dir)
        debs = sorted(cache_dir.glob(f"{package}_*.deb"))
        if not debs:
            raise GuestBuildError(f"apt-get download {package} left no .deb in {cache_dir}")
    partial = cache_dir / (package + ".partial")
    _run(["rm", "-rf", str(partial)])
    _run(["dpkg", "-x", str(debs[-1]), str(partial)])
    partial.rename(root)
    return open_kernel_tree(root)


def _run(argv: list[str], cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GuestBuildError(f"{argv[0]} failed to run: {exc}") from exc
    if proc.returncode != 0:
        raise GuestBuildError(f"`{' '.join(argv)}` exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return proc.stdout
