"""``python -m vmm.guest build [--out DIR] [--kernel-root DIR] [--force]``: build the test guest."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vmm.errors import GuestBuildError
from vmm.guest.build import build_guest, default_cache_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vmm.guest", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build (or reuse) the guest kernel + initramfs")
    build.add_argument(
        "--out", type=Path, default=None, help="output directory (default: <cache>/image, cache = $FORKD_GUEST_CACHE)"
    )
    build.add_argument(
        "--kernel-root",
        type=Path,
        default=None,
        help="an unpacked kernel package (dpkg -x); default: download the cloud kernel",
    )
    build.add_argument("--force", action="store_true", help="rebuild even if a matching build exists")
    args = parser.parse_args(argv)
    try:
        image = build_guest(args.out or default_cache_dir() / "image", args.kernel_root, args.force)
    except GuestBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"guest ready in {image.directory}: kernel {image.kernel_release}, "
        f"initrd {image.initrd.stat().st_size // 1024} KiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
