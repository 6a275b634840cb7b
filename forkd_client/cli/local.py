"""Making snapshots from local files: ``import`` and ``snapshot-compact``."""

from __future__ import annotations

import argparse
from pathlib import Path

from .output import Context, human_size


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "import", parents=[common],
        help="install a directory holding vmstate + memory.bin [+ rootfs.ext4] as a snapshot",
    )
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument("tag", metavar="TAG")
    p.add_argument("--parent", metavar="P", help="make it a chain link on snapshot P")
    p.add_argument("--move", action="store_true", help="move the files instead of cloning them")
    p.add_argument("--force", action="store_true", help="replace an existing snapshot with this tag")
    p.set_defaults(func=run_import)

    p = sub.add_parser(
        "snapshot-compact", parents=[common],
        help="verify a chain and write its head as a new base snapshot",
    )
    p.add_argument("--from", dest="src", required=True, metavar="S", help="chain head to compact")
    p.add_argument("--to", dest="dst", required=True, metavar="D", help="tag of the new base snapshot")
    p.set_defaults(func=run_compact)


def run_import(args: argparse.Namespace, ctx: Context) -> int:
    with ctx.store() as store:
        snap = store.import_snapshot(args.dir, args.tag, parent=args.parent, move=args.move, force=args.force)
    link = f" on parent {snap.parent_tag}" if snap.parent_tag else ""
    ctx.print(f"Imported {snap.tag}{link} ({human_size(snap.logical_size)}, {human_size(snap.disk_size)} on disk)")
    return 0


def run_compact(args: argparse.Namespace, ctx: Context) -> int:
    with ctx.store() as store:
        depth = store.depth(args.src)
        snap = store.compact(args.src, args.dst)
    ctx.print(f"Compacted {args.src} (chain depth {depth}) into base {snap.tag}")
    return 0
