"""Local snapshot listing and housekeeping: ``images``, ``inspect``, ``tag``, ``rmi``."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ClientError, InvalidSnapshotDir
from ..exitcodes import exit_code_for
from ..snapdir import LocalSnapshot
from ..store import SnapshotStore
from .output import Context, human_size


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("images", parents=[common], help="list local snapshots")
    p.add_argument("--json", action="store_true", help="print JSON (sizes in bytes)")
    p.set_defaults(func=run_images)

    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="show one snapshot, its chain and its files (or, for ns/repo[:tag], what a hub holds)",
    )
    p.add_argument("tag", metavar="TAG_OR_REF")
    p.add_argument("--json", action="store_true", help="print JSON (sizes in bytes)")
    p.add_argument(
        "--verify",
        action="store_true",
        help="also check every link's parent_content_hash (hashes only files not verified before)",
    )
    p.add_argument(
        "--deep",
        action="store_true",
        help="--verify, and hash every file of the chain again in full, trusting no record",
    )
    p.add_argument(
        "--remote",
        action="store_true",
        help="for a tag pulled from a hub: show what that hub holds for its layer (annotations, provenance)",
    )
    p.set_defaults(func=run_inspect)

    p = sub.add_parser("tag", parents=[common], help="make DST a copy of SRC (reflinked where possible)")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    p.set_defaults(func=run_tag)

    p = sub.add_parser("rmi", parents=[common], help="remove local snapshots")
    p.add_argument("tags", nargs="+", metavar="TAG")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--cascade", action="store_true", help="also remove every snapshot chained on it")
    group.add_argument("--force", action="store_true", help="remove it even though others chain on it")
    p.set_defaults(func=run_rmi)


def _depth(store: SnapshotStore, tag: str) -> tuple[int | None, str | None]:
    try:
        return store.depth(tag), None
    except ClientError as e:
        return None, str(e)


def run_images(args: argparse.Namespace, ctx: Context) -> int:
    snaps: list[LocalSnapshot] = []
    with ctx.store() as store:
        for tag in store.tags():
            try:
                snaps.append(store.get(tag))
            except InvalidSnapshotDir as e:  # one unreadable snapshot must not hide the others
                ctx.warn(str(e))
        depths = {s.tag: _depth(store, s.tag) for s in snaps}
    if args.json:
        ctx.json(
            [
                {
                    "tag": s.tag,
                    "parent_tag": s.parent_tag,
                    "depth": depths[s.tag][0],
                    "chain_error": depths[s.tag][1],
                    "disk_size": s.disk_size,
                    "logical_size": s.logical_size,
                    "created": s.created,
                    "dir": str(s.dir),
                }
                for s in snaps
            ]
        )
        return 0
    rows = [
        [
            s.tag,
            s.parent_tag or "-",
            str(depths[s.tag][0]) if depths[s.tag][0] else "broken",
            human_size(s.disk_size),
            human_size(s.logical_size),
            s.created,
        ]
        for s in snaps
    ]
    ctx.table(
        ["TAG", "PARENT", "DEPTH", "SIZE ON DISK", "LOGICAL SIZE", "CREATED"],
        rows,
        right=("DEPTH", "SIZE ON DISK", "LOGICAL SIZE"),
    )
    return 0


def run_inspect(args: argparse.Namespace, ctx: Context) -> int:
    if "/" in args.tag or args.remote:  # a hub reference (no local tag has a '/'), or where a tag came from
        from .inspect_remote import run_inspect_remote

        return run_inspect_remote(args, ctx)
    with ctx.store() as store:
        snap = store.get(args.tag)
        problem: ClientError | None = None
        chain: list[str] | None = None
        try:
            chain = [s.tag for s in store.chain(args.tag)]
            if args.deep:
                args.verify = True
            if args.verify:
                store.verify_chain(args.tag, forkd_hashes=True)
                if args.deep:
                    store.verify_files_deep(args.tag)
        except ClientError as e:
            problem = e
        info = snap.to_obj()
        info["built_from"] = _built_from(store, args.tag)
        info["depth"] = len(chain) if chain else None
        info["ancestors"] = chain[:-1] if chain else []
        info["dependents"] = store.dependents(args.tag)
        info["chain_error"] = str(problem) if problem is not None else None
        if args.verify:
            info["verified"] = problem is None
    if args.json:
        ctx.json(info)
    else:
        _print_inspect(ctx, snap, info)
    if problem is not None:
        ctx.error(str(problem))
        return exit_code_for(problem)  # 6 when a parent's content changed, 1 for a broken chain
    return 0


def _built_from(store: SnapshotStore, tag: str) -> dict[str, Any] | None:
    """The image or Debian userland the chain's base was baked from (``forkd from-image`` /
    ``from-debian`` record it as annotations): the nearest snapshot of the chain that says."""
    from ..images.provenance import SOURCE_KEYS, describe_source

    try:
        chain = store.chain(tag)
    except ClientError:
        return None
    for snap in reversed(chain):
        if described := describe_source(snap.annotations):
            keys = {k: v for k, v in snap.annotations.items() if k in SOURCE_KEYS}
            return {"tag": snap.tag, "source": described, "annotations": keys}
    return None


def _print_inspect(ctx: Context, snap: LocalSnapshot, info: dict[str, Any]) -> None:
    depth = info["depth"]
    lines = [
        ("Tag", snap.tag),
        ("Directory", str(snap.dir)),
        ("Created", snap.created),
        ("Parent", snap.parent_tag or "- (base)"),
        ("Parent content hash", snap.parent_content_hash or "-"),
        ("Chain depth", str(depth) if depth is not None else "unknown (chain broken)"),
        ("Ancestors", " -> ".join(info["ancestors"]) or "-"),
        ("Dependents", ", ".join(info["dependents"]) or "-"),
        ("Size on disk", f"{human_size(snap.disk_size)} ({snap.disk_size} bytes)"),
        ("Logical size", f"{human_size(snap.logical_size)} ({snap.logical_size} bytes)"),
        ("Managed", "yes (forkd-hub.json)" if snap.managed else "no (made by forkd)"),
    ]
    if built := info.get("built_from"):
        lines.append(("Built from", built["source"] + ("" if built["tag"] == snap.tag else f" (base {built['tag']})")))
    if info.get("verified"):
        lines.append(("Chain verified", "yes"))
    origin = snap.origin or {}
    if origin.get("signed_by"):  # recorded by pull --verify-key (forkd_client.hub.signing)
        lines.append(
            ("Signature", f"verified at pull: key {origin['signed_by']} (artifact {origin.get('signature', '-')})")
        )
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        ctx.print(f"{key + ':':<{width + 1}} {value}")
    ctx.print("Compat:" + ("" if snap.compat else " -"))
    for key, value in sorted(snap.compat.items()):
        ctx.print(f"  {key}: {value}")
    ctx.print("Annotations:" + ("" if snap.annotations else " -"))
    for key, value in sorted(snap.annotations.items()):
        ctx.print(f"  {key}: {value}")
    ctx.print("Files:")
    rows = [
        # a format v2 pull records the chunk tree, not a blake3 of the bytes
        [role, str(rec.size), rec.digest or (f"tree {rec.chunk_tree[1]}" if rec.chunk_tree else "-"), rec.sha256 or "-"]
        for role, rec in snap.files.items()
    ]
    ctx.table(["FILE", "SIZE", "DIGEST", "SHA256"], rows, right=("SIZE",), flexible=("DIGEST", "SHA256"))


def run_tag(args: argparse.Namespace, ctx: Context) -> int:
    with ctx.store() as store:
        store.tag(args.src, args.dst)
    ctx.print(f"Tagged {args.src} as {args.dst}")
    return 0


def run_rmi(args: argparse.Namespace, ctx: Context) -> int:
    status = 0
    with ctx.store() as store:
        for tag in args.tags:
            try:
                removed = store.remove(tag, cascade=args.cascade, force=args.force)
            except ClientError as e:
                ctx.error(str(e))
                status = exit_code_for(e)
                continue
            for t in removed:
                ctx.print(f"Removed: {t}")
    return status
