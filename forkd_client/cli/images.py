"""Local snapshot listing and housekeeping: ``images``, ``inspect``, ``tag``, ``rmi``."""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
from typing import TYPE_CHECKING, Any

from ..errors import ClientError, InvalidSnapshotDir, UsageError
from ..exitcodes import exit_code_for
from .output import Context, human_size

if TYPE_CHECKING:  # the store is opened through ctx.store(): not imported by ``forkd --help``
    from ..snapdir import LocalSnapshot
    from ..store import SnapshotStore


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("images", parents=[common], help="list local snapshots")
    p.add_argument("--json", action="store_true", help="print JSON (sizes in bytes)")
    p.add_argument("-q", "--quiet", action="store_true", help="print the tags only")
    p.add_argument(
        "-f",
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="reference=GLOB (tags matching; repeat for any of several), parent=TAG (its direct children), "
        "dangling=true|false (a chain that is broken: a parent is missing); repeatable, all must hold",
    )
    p.add_argument(
        "--format",
        metavar="FORMAT",
        help="'json' (one object a line) or a template of fields like '{{.Tag}}\\t{{.Size}}' "
        f"('table ' first for a header); fields: {', '.join(FIELDS)}",
    )
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


#: ``--format`` fields → (header, JSON key of :func:`_image_row`)
FIELDS = {
    "Tag": ("TAG", "tag"),
    "Parent": ("PARENT", "parent_tag"),
    "Depth": ("DEPTH", "depth"),
    "Size": ("SIZE", "size"),
    "UniqueSize": ("UNIQUE SIZE", "unique_size"),
    "SharedSize": ("SHARED SIZE", "shared_size"),
    "LogicalSize": ("LOGICAL SIZE", "logical_size"),
    "Created": ("CREATED", "created"),
    "Dir": ("DIR", "dir"),
}
_SIZES = {"size", "unique_size", "shared_size", "logical_size"}
_FIELD = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")


def _filters(specs: list[str]) -> tuple[list[str], str | None, bool | None]:
    """``--filter``s as (reference globs, parent, dangling). Raises UsageError for a malformed one."""
    globs: list[str] = []
    parent: str | None = None
    dangling: bool | None = None
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not value:
            raise UsageError(f"--filter {spec!r}: give KEY=VALUE (reference=GLOB, parent=TAG, dangling=true|false)")
        if key == "reference":
            globs.append(value)
        elif key == "parent":
            parent = value
        elif key == "dangling" and value.lower() in ("true", "false", "1", "0"):
            dangling = value.lower() in ("true", "1")
        else:
            raise UsageError(f"--filter {spec!r}: unknown filter (reference=GLOB, parent=TAG, dangling=true|false)")
    return globs, parent, dangling


def _image_row(s: LocalSnapshot, depth: tuple[int | None, str | None], shared: int) -> dict[str, Any]:
    """One snapshot as ``images`` shows it: ``unique_size`` is its own files on disk (what ``rmi`` frees),
    ``shared_size`` its ancestors' (what it shares with its parents), ``size`` both (what forking it needs)."""
    return {
        "tag": s.tag,
        "parent_tag": s.parent_tag,
        "depth": depth[0],
        "chain_error": depth[1],
        "size": s.disk_size + shared,
        "unique_size": s.disk_size,
        "shared_size": shared,
        "disk_size": s.disk_size,
        "logical_size": s.logical_size,
        "created": s.created,
        "dir": str(s.dir),
    }


def _formatted(template: str, row: dict[str, Any]) -> str:
    def field(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in FIELDS:
            raise UsageError(f"--format: unknown field .{name} (fields: {', '.join(FIELDS)})")
        key = FIELDS[name][1]
        value = row[key]
        return human_size(value) if key in _SIZES else "-" if value is None else str(value)

    return _FIELD.sub(field, template.replace("\\t", "\t").replace("\\n", "\n"))


def run_images(args: argparse.Namespace, ctx: Context) -> int:
    globs, parent, dangling = _filters(args.filter)  # a bad filter fails before the store is read
    snaps: list[LocalSnapshot] = []
    with ctx.store() as store:
        for tag in store.tags():
            try:
                snaps.append(store.get(tag))
            except InvalidSnapshotDir as e:  # one unreadable snapshot must not hide the others
                ctx.warn(str(e))
        depths = {s.tag: _depth(store, s.tag) for s in snaps}
        by_tag = {s.tag: s for s in snaps}

        def shared(s: LocalSnapshot) -> int:
            total, seen, at = 0, {s.tag}, s.parent_tag
            while at is not None and at in by_tag and at not in seen:
                seen.add(at)
                total += by_tag[at].disk_size
                at = by_tag[at].parent_tag
            return total

        rows = [_image_row(s, depths[s.tag], shared(s)) for s in snaps]
    rows = [
        r
        for r in rows
        if (not globs or any(fnmatch.fnmatchcase(r["tag"], g) for g in globs))
        and (parent is None or r["parent_tag"] == parent)
        and (dangling is None or (r["chain_error"] is not None) == dangling)
    ]
    if args.quiet:
        for r in rows:
            ctx.print(r["tag"])
        return 0
    if args.json or args.format == "json":
        if args.json:
            ctx.json(rows)
        else:
            for r in rows:
                ctx.print(json.dumps(r, ensure_ascii=False))
        return 0
    if args.format:
        template = args.format
        if template.startswith("table "):
            template = template.removeprefix("table ")
            ctx.print(_FIELD.sub(lambda m: FIELDS.get(m.group(1), ("?",))[0], template.replace("\\t", "\t")))
        for r in rows:
            ctx.print(_formatted(template, r))
        return 0
    ctx.table(
        ["TAG", "PARENT", "DEPTH", "SIZE", "UNIQUE SIZE", "SHARED SIZE", "LOGICAL SIZE", "CREATED"],
        [
            [
                r["tag"],
                r["parent_tag"] or "-",
                str(r["depth"]) if r["depth"] else "broken",
                human_size(r["size"]),
                human_size(r["unique_size"]),
                human_size(r["shared_size"]),
                human_size(r["logical_size"]),
                r["created"],
            ]
            for r in rows
        ],
        right=("DEPTH", "SIZE", "UNIQUE SIZE", "SHARED SIZE", "LOGICAL SIZE"),
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
