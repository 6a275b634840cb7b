"""forkd pack files: ``pack`` and ``unpack`` (``.forkd-snapshot.tar.zst``, v1 and v2)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .output import Context, human_size


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("pack", parents=[common], help="write a snapshot (and its chain) as a forkd pack")
    p.add_argument("tag", metavar="TAG")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="FILE", help="pack file to write")
    p.add_argument("--description", metavar="D", help="description recorded in the pack")
    p.add_argument("--base-image", metavar="B", help="base image name recorded in the pack (informational)")
    p.set_defaults(func=run_pack)

    p = sub.add_parser("unpack", parents=[common], help="install the snapshots of a forkd pack")
    p.add_argument("file", type=Path, metavar="FILE")
    p.add_argument("--tag", metavar="T", help="install a single-snapshot pack under this tag")
    p.add_argument("--force", action="store_true", help="replace existing snapshots with the same tags")
    p.set_defaults(func=run_unpack)


def run_pack(args: argparse.Namespace, ctx: Context) -> int:
    with ctx.store() as store:
        depth = store.depth(args.tag)
        out = store.pack(args.tag, args.out, description=args.description, base_image=args.base_image)
    kind = "v1 pack" if depth == 1 else f"v2 pack of {depth} links"
    ctx.print(f"Packed {args.tag} into {out} ({kind}, {human_size(out.stat().st_size)})")
    return 0


def run_unpack(args: argparse.Namespace, ctx: Context) -> int:
    warnings: list[str] = []
    with ctx.store() as store:
        installed = store.unpack(args.file, tag=args.tag, force=args.force, warnings=warnings)
    for warning in warnings:
        ctx.warn(warning)
    for snap in installed:
        ctx.print(f"Unpacked: {snap.tag}")
    return 0
