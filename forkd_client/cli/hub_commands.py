"""The parsers of the hub commands: ``login``, ``logout``, ``push``, ``pull``, ``search``, ``delete``.

What they run lives in :mod:`.hub` and is imported only when one of them runs, so that
``forkd --help`` and the local commands (``fork``, ``import``, ``images`` ...) never load httpx,
cryptography or the push/pull machinery (tests/forkd_client/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from .output import Context


def _handler(name: str) -> Callable[[argparse.Namespace, Context], int]:
    """The command function ``name`` of :mod:`.hub`, imported when the command runs."""

    def run(args: argparse.Namespace, ctx: Context) -> int:
        from . import hub

        return int(getattr(hub, name)(args, ctx))

    run.__name__ = run.__qualname__ = name
    return run


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("login", parents=[common], help="store a token for a hub (XDG config, mode 0600)")
    p.add_argument("url", metavar="HUB_URL", help="e.g. http://127.0.0.1:8080")
    p.add_argument("--token-stdin", action="store_true", help="read the token from standard input")
    p.add_argument("--token", help="the token (prefer --token-stdin: arguments show up in ps)")
    p.add_argument(
        "--default",
        action="store_true",
        dest="make_default",
        help="make this the default hub (the first login is; later ones only with this flag)",
    )
    p.set_defaults(func=_handler("run_login"))

    p = sub.add_parser("logout", parents=[common], help="forget the token of a hub (default: the current one)")
    p.add_argument("url", nargs="?", metavar="HUB_URL")
    p.set_defaults(func=_handler("run_logout"))

    p = sub.add_parser("push", parents=[common], help="push a local snapshot chain to a hub")
    p.add_argument("local_tag", metavar="LOCAL_TAG")
    p.add_argument("ref", metavar="REF", help="[HOST[:PORT]/]namespace/repo[:tag] (default tag: latest)")
    p.add_argument("--public", action="store_true", help="make the repository public when this push creates it")
    p.add_argument(
        "--force", action="store_true", help="move the tag even if another push moved it since this one started"
    )
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="quiet: no progress, no hub line; print only the digest (errors and warnings still go to stderr)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--annotation",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="record this annotation in the push's provenance (repeatable; CI facts are added "
        "automatically under GitHub Actions, GitLab CI or CI=true)",
    )
    p.add_argument(
        "--no-provenance", action="store_true", help="attach no provenance referrer, even in CI or with --annotation"
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="show progress on stderr even with --json (CI logs: a line every FORKD_PROGRESS_INTERVAL s)",
    )
    p.add_argument(
        "--sign",
        type=Path,
        metavar="KEYFILE",
        help="sign the head with this Ed25519 private key (forkd keygen) before the tag moves",
    )
    p.add_argument(
        "--record-profile",
        action="store_true",
        help="before uploading, fork one child of LOCAL_TAG through a recording mount, run --profile-exec in it, "
        "and attach the memory and disk chunks it read (in order) to the pushed head: the first lazy fork of it "
        "then fetches "
        "its working set first (docs/lazy-fork.md; needs FUSE and the VMM here)",
    )
    p.add_argument(
        "--profile-exec",
        metavar="CMD",
        help="what the recording child runs (default: true, i.e. the restore and the guest agent's first answer)",
    )
    p.set_defaults(func=_handler("run_push"))

    p = sub.add_parser("pull", parents=[common], help="pull a snapshot chain from a hub")
    p.add_argument(
        "ref",
        metavar="REF",
        help="[HOST[:PORT]/]namespace/repo[:tag|@digest]; with --hub, "
        "forkd's owner/name[@version]; or a forkd pack URL",
    )
    p.add_argument(
        "--as",
        "--tag",
        dest="as_tag",
        metavar="LOCAL_TAG",
        help="local tag for the head (default: from REF); --tag is forkd's spelling",
    )
    p.add_argument(
        "--hub",
        metavar="REGISTRY_URL",
        help="forkd's form: pull REF (owner/name[@version]) from this registry.json URL, as forkd does",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace local snapshots of the same tags, and pull again links whose files changed",
    )
    p.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="quiet: no progress, no hub line; print only the digest (errors and warnings still go to stderr)",
    )
    p.add_argument(
        "--lazy",
        action="store_true",
        help="return once the head's memory image (and root filesystem) is mounted (a detached process fetches "
        "and verifies chunks as they are read, fills the rest, then installs the chain as a plain pull does; "
        "docs/lazy-fork.md)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--verify-key",
        action="append",
        type=Path,
        default=[],
        metavar="PUBKEY",
        help="refuse the chain unless its head is signed by this public key (repeatable; also the "
        "namespace's keys in $XDG_CONFIG_HOME/forkd/trusted-keys.json)",
    )
    p.add_argument(
        "--peers",
        action="store_true",
        help="also fetch chunks from fleet peers holding the layers (FORKD_PEERS=1; needs FORKD_FLEET_TOKEN; every "
        "chunk verified, a bad peer dropped and its chunks fetched from the hub; docs/mirrors.md)",
    )
    p.set_defaults(func=_handler("run_pull"))

    p = sub.add_parser("search", parents=[common], help="search repositories on a hub")
    p.add_argument("query", nargs="?", default="", metavar="QUERY")
    p.add_argument("--hub", metavar="HUB_URL", help="hub to search (default: FORKD_HUB_URL or the last login)")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_handler("run_search"))

    p = sub.add_parser("delete", parents=[common], help="delete a snapshot (tag or digest) on a hub")
    p.add_argument("ref", metavar="REF", help="[HOST[:PORT]/]namespace/repo[:tag|@digest]")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--cascade", action="store_true", help="also delete the snapshots chained on it")
    group.add_argument("--force", action="store_true", help="delete it even though others chain on it")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_handler("run_delete"))
