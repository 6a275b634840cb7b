"""The parsers of the hub management commands a user runs with their own token: ``repo``, ``token``, ``audit``.

``forkd repo show|set`` reads and changes a repository's visibility, description and README (Markdown);
``forkd token list|create|revoke`` manages the robot tokens of the caller's namespaces (never wider than
the caller's own token; the hub decides); ``forkd audit NS`` reads a namespace's audit log. Deleting a tag
is ``forkd delete NS/REPO:TAG``. What they run lives in :mod:`.manage`, imported only when one runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from .output import Context


def _handler(name: str) -> Callable[[argparse.Namespace, Context], int]:
    def run(args: argparse.Namespace, ctx: Context) -> int:
        from . import manage

        return int(getattr(manage, name)(args, ctx))

    run.__name__ = run.__qualname__ = name
    return run


def _hub(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hub", metavar="HUB_URL", help="the hub (default: FORKD_HUB_URL or the default login)")
    p.add_argument("--json", action="store_true", help="print JSON")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("repo", parents=[common], help="show or change a repository on a hub")
    repo = p.add_subparsers(dest="repo_command", metavar="SUBCOMMAND", required=True)
    s = repo.add_parser("show", parents=[common], help="a repository's visibility, description, README and tags")
    s.add_argument("name", metavar="NS/REPO", help="[HOST[:PORT]/]namespace/repo")
    _hub(s)
    s.set_defaults(func=_handler("run_repo_show"))
    s = repo.add_parser("set", parents=[common], help="change a repository's visibility, description or README")
    s.add_argument("name", metavar="NS/REPO", help="[HOST[:PORT]/]namespace/repo")
    visibility = s.add_mutually_exclusive_group()
    visibility.add_argument("--public", action="store_const", const=True, dest="public", help="anyone may pull it")
    visibility.add_argument("--private", action="store_const", const=False, dest="public", help="only tokens with pull")
    text = s.add_mutually_exclusive_group()
    text.add_argument("--description", metavar="TEXT", help="the short description (Markdown; '' clears it)")
    text.add_argument("--description-file", type=Path, metavar="FILE", help="read the description from FILE")
    s.add_argument("--readme-file", type=Path, metavar="FILE", help="the long description (Markdown) from FILE")
    _hub(s)
    s.set_defaults(func=_handler("run_repo_set"))

    p = sub.add_parser("token", parents=[common], help="manage the robot tokens of your namespaces on a hub")
    token = p.add_subparsers(dest="token_command", metavar="SUBCOMMAND", required=True)
    s = token.add_parser("list", parents=[common], help="the tokens your token may manage")
    s.add_argument("--namespace", metavar="NS", help="only tokens reaching this namespace")
    _hub(s)
    s.set_defaults(func=_handler("run_token_list"))
    s = token.add_parser("create", parents=[common], help="make a robot token (its secret is printed once)")
    s.add_argument("name", metavar="NAME", help="the new token's name ([a-z0-9][a-z0-9._-]*)")
    s.add_argument(
        "--scope",
        action="append",
        required=True,
        metavar="SCOPE",
        help="ACTION:NS/REPO (pull, push, delete; globs like acme/*), at most what your own token has; repeatable",
    )
    s.add_argument("--expires", metavar="AGE", help="30d, 12h, 90m, 3600s or never (default 90d; never past yours)")
    _hub(s)
    s.set_defaults(func=_handler("run_token_create"))
    s = token.add_parser("revoke", parents=[common], help="revoke a robot token you manage")
    s.add_argument("name", metavar="NAME", help="the token's name")
    _hub(s)
    s.set_defaults(func=_handler("run_token_revoke"))

    p = sub.add_parser("audit", parents=[common], help="a namespace's audit log on a hub (its members)")
    p.add_argument("namespace", metavar="NS", help="the namespace")
    p.add_argument("--limit", type=int, default=50, help="at most N events (default 50)")
    p.add_argument("--before", type=int, metavar="ID", help="events older than this id (the next page)")
    _hub(p)
    p.set_defaults(func=_handler("run_audit"))
