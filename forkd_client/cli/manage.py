"""What ``forkd repo``, ``forkd token`` and ``forkd audit`` run (parsers in :mod:`.manage_commands`).

Each is one call of the hub's API with the caller's own token (``RepositoryClient.update``,
``HubClient.account()``); the hub decides what the token may do and its refusals come back as the HubError
family (exit 3 for a scope it lacks). Errors of our own: UsageError (a reference with a tag, nothing to
change, an unreadable file).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from clikit.units import human_size

from ..errors import UsageError
from ..hub.client import HubClient
from ..hub.reference import Reference
from .hub import _client
from .output import Context
from .summary import one_line


def _repository(args: argparse.Namespace) -> Reference:
    ref = Reference.parse(args.name)
    if ref.tag is not None or ref.digest is not None:
        raise UsageError(f"{args.name}: name a repository (NS/REPO), not a tag or digest")
    return ref


def _read(path: Path, what: str) -> str:
    try:
        return path.expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{what} {path}: {getattr(e, 'strerror', None) or e}") from None


def _hub_client(args: argparse.Namespace, ctx: Context, ref: Reference | None = None) -> HubClient:
    return _client(ref, args.hub, None if args.json else ctx)


def run_repo_show(args: argparse.Namespace, ctx: Context) -> int:
    ref = _repository(args)
    with _hub_client(args, ctx, ref) as client:
        info = client.repository(ref.name).info()
    if args.json:
        ctx.json(info)
        return 0
    _print_repository(ctx, info)
    return 0


def _print_repository(ctx: Context, info: dict[str, Any]) -> None:
    ctx.print(
        f"{info.get('name')}: {'public' if info.get('public') else 'private'}, {info.get('pullCount', 0)} pull(s)"
    )
    ctx.print(f"description: {one_line(info.get('description') or '') or '(none)'}")
    readme = info.get("readme") or ""
    ctx.print(f"README: {len(readme.splitlines())} line(s)" if readme else "README: (none)")
    tags = info.get("tags") or []
    if not tags:
        ctx.print("tags: (none)")
        return
    ctx.table(
        ["TAG", "DIGEST", "SIZE", "UPDATED"],
        [
            [t.get("name", ""), t.get("digest", ""), human_size(int(t.get("logicalSize") or 0)), t.get("updated", "")]
            for t in tags
        ],
        right=("SIZE",),
        flexible=("DIGEST",),
    )


def run_repo_set(args: argparse.Namespace, ctx: Context) -> int:
    ref = _repository(args)
    description = args.description
    if args.description_file is not None:
        description = _read(args.description_file, "--description-file")
    readme = _read(args.readme_file, "--readme-file") if args.readme_file is not None else None
    if args.public is None and description is None and readme is None:
        raise UsageError("nothing to change: give --public/--private, --description(-file) or --readme-file")
    with _hub_client(args, ctx, ref) as client:
        info = client.repository(ref.name).update(public=args.public, description=description, readme=readme)
    if args.json:
        ctx.json(info)
        return 0
    _print_repository(ctx, info)
    return 0


def run_token_list(args: argparse.Namespace, ctx: Context) -> int:
    with _hub_client(args, ctx) as client:
        tokens = client.account().tokens(args.namespace)
    if args.json:
        ctx.json(tokens)
        return 0
    if not tokens:
        ctx.print("No tokens you may manage" + (f" reach {args.namespace}" if args.namespace else ""))
        return 0
    ctx.table(
        ["NAME", "SCOPES", "EXPIRES", "LAST USED", "STATUS"],
        [
            [
                t.get("name", ""),
                " ".join(t.get("scopes") or []),
                (t.get("expires_at") or "never")[:19],
                (t.get("last_used_at") or "-")[:19],
                t.get("status", ""),
            ]
            for t in tokens
        ],
        flexible=("SCOPES",),
    )
    return 0


def run_token_create(args: argparse.Namespace, ctx: Context) -> int:
    with _hub_client(args, ctx) as client:
        made = client.account().create_token(args.name, args.scope, args.expires)
    if args.json:
        ctx.json(made)
        return 0
    ctx.print(str(made.get("token", "")))  # stdout: the secret alone, to pipe into a secret store
    expires = made.get("expires_at") or "never"
    scopes = " ".join(made.get("scopes") or args.scope)
    print(f"token {args.name} ({scopes}, expires {expires}): its secret is shown this once", file=ctx.stderr)
    return 0


def run_token_revoke(args: argparse.Namespace, ctx: Context) -> int:
    with _hub_client(args, ctx) as client:
        body = client.account().revoke_token(args.name)
    if args.json:
        ctx.json(body)
    else:
        ctx.print(f"Revoked token {args.name}")
    return 0


def run_audit(args: argparse.Namespace, ctx: Context) -> int:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    with _hub_client(args, ctx) as client:
        page = client.account().audit(args.namespace, args.limit, args.before)
    if args.json:
        ctx.json(page)
        return 0
    events = page.get("events") or []
    if not events:
        ctx.print(f"No audit events in {args.namespace}")
        return 0
    ctx.table(
        ["ID", "AT", "ACTOR", "ACTION", "REPOSITORY", "REFERENCE"],
        [
            [
                str(e.get("id", "")),
                str(e.get("at", ""))[:19],
                str(e.get("actor", "")),
                str(e.get("action", "")),
                str(e.get("repository") or "-"),
                str(e.get("reference") or "-"),
            ]
            for e in events
        ],
        right=("ID",),
    )
    if page.get("nextBefore") is not None:
        ctx.print(f"older: forkd audit {args.namespace} --before {page['nextBefore']}")
    return 0
