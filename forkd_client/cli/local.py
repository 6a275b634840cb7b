"""Local housekeeping: ``import`` and ``snapshot-compact`` (snapshots from local files), ``prune`` (leftovers)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..diskspace import no_space_message
from .output import Context, human_size


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "import",
        parents=[common],
        help="install a directory holding vmstate + memory.bin [+ rootfs.ext4] as a snapshot",
    )
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument("tag", metavar="TAG")
    p.add_argument("--parent", metavar="P", help="make it a chain link on snapshot P")
    p.add_argument("--move", action="store_true", help="move the files instead of cloning them")
    p.add_argument("--force", action="store_true", help="replace an existing snapshot with this tag")
    p.set_defaults(func=run_import)

    p = sub.add_parser(
        "snapshot-compact",
        parents=[common],
        help="verify a chain and write its head as a new base snapshot",
    )
    p.add_argument("--from", dest="src", required=True, metavar="S", help="chain head to compact")
    p.add_argument("--to", dest="dst", required=True, metavar="D", help="tag of the new base snapshot")
    p.set_defaults(func=run_compact)

    p = sub.add_parser(
        "prune",
        parents=[common],
        help="remove what interrupted pulls and pushes left behind, and records of files that are gone",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run_prune)


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


def run_prune(args: argparse.Namespace, ctx: Context) -> int:
    with ctx.store() as store:
        from ..prune import prune  # imported by the command, not by ``forkd --help``

        report = prune(store, dry_run=args.dry_run)
    if args.json:
        ctx.json(report.to_obj())
        return 0
    verb = "would remove" if report.dry_run else "removed"
    for name in report.staging:
        ctx.print(f"{verb} .staging/{name}")
    ctx.print(
        f"{verb} {len(report.staging)} staged director{'y' if len(report.staging) == 1 else 'ies'} "
        f"({human_size(report.bytes_freed)}), {len(report.transfer_entries)} resumable upload record(s), "
        f"{report.chunk_index_rows + report.verified_rows} record(s) of files that are gone"
    )
    for name in report.not_rewritten:
        ctx.warn(f"{name} was left as it was: {no_space_message(ctx.home / name, ctx.home)}")
    return 0
