"""``forkd guest build``: make (or reuse) the default guest image the VMM commands boot.

The Debian cloud kernel is extracted with ``dpkg -x`` (downloaded with ``apt-get download``
unless ``--kernel-root`` gives an unpacked one), a busybox initramfs carries the guest agent
and the RNG reseed helper. The result is cached (``$FORKD_GUEST_CACHE``, default
``$XDG_CACHE_HOME/forkd/guest``) and reused while its inputs are unchanged.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .output import Context


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("guest", parents=[common], help="manage the default guest image (kernel + initramfs)")
    guest = p.add_subparsers(dest="guest_command", metavar="SUBCOMMAND", required=True)
    b = guest.add_parser("build", parents=[common], help="build (or reuse) the default guest image")
    b.add_argument("--out", type=Path, help="output directory (default: the guest cache)")
    b.add_argument("--kernel-root", type=Path, help="an unpacked kernel package (dpkg -x) instead of downloading one")
    b.add_argument("--force", action="store_true", help="rebuild even if a matching build exists")
    b.add_argument("--json", action="store_true", help="print JSON")
    b.set_defaults(func=run_build)


def run_build(args: argparse.Namespace, ctx: Context) -> int:
    from vmm.errors import GuestBuildError  # the VMM stack loads only for commands that use it
    from vmm.guest.build import build_guest, default_cache_dir

    out = args.out or default_cache_dir() / "image"
    try:
        image = build_guest(out, args.kernel_root, args.force)
    except GuestBuildError as e:
        ctx.error(f"{e} (needs: apt-get install qemu-system-x86 busybox-static cpio)")
        return 1
    info = {
        "directory": str(image.directory),
        "kernel": str(image.kernel),
        "initrd": str(image.initrd),
        "kernel_release": image.kernel_release,
        "cmdline": image.cmdline,
        "rootfs": str(image.rootfs) if image.rootfs else None,
    }
    if args.json:
        ctx.json(info)
    else:
        ctx.print(
            f"guest ready in {image.directory}: kernel {image.kernel_release}, "
            f"initrd {image.initrd.stat().st_size // 1024} KiB"
        )
    return 0
