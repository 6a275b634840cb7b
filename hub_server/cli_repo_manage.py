"""``forkd-hub repo list|show|set|delete-tag``: an operator's view and changes of repositories, on the hub's
database directly (issue 30; a user does the same with ``forkd repo`` over ``/api/v1/repositories``).

    repo list [NS] [--json]                          every repository (of NS), public and private
    repo show NS/REPO [--json]                       one repository: visibility, description, README, tags, policy
    repo set NS/REPO [--public|--private] [--description TEXT] [--readme-file FILE|-]
    repo delete-tag NS/REPO:TAG [--allow-immutable]  remove one tag (its manifest too when the tag was its last)

Each opens the hub like ``forkd-hub repo policy`` (``--data-dir``, ``--database-url``, ``--storage`` or their
``FORKD_HUB_*`` variables) and calls the services the API calls (``CatalogService.repositories``, ``.repository``,
``.update``; ``DeleteService.delete``) as an admin principal named ``cli:<login user>``: the same limits, the
same audit events (``update``, ``visibility``, ``delete``). ``--json`` prints what the API answers
(``RepositoriesOut``, ``RepositoryOut``, ``DeleteOut``).

An immutable tag is deleted only with ``--allow-immutable`` (the API lets a delete token do it; an operator
deleting one should mean it); its audit event then carries ``immutableOverride: true``.

Exit status: 0 success, 1 a rejected request (bad or unknown name, a README over the limit, an immutable tag: one
``forkd-hub: error:`` line), 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from hub_server.api.schemas import DeleteOut, RepositoriesOut, RepositoryOut
from hub_server.auth.scopes import Principal
from hub_server.cli_common import add_store_args, cli_actor, run_on_hub
from hub_server.compose import HubServices
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.names import check_repository, check_tag
from hub_server.registry.read.catalog import RepositoryDetail, RepositorySummary

__all__ = ["add_commands"]

#: Repositories fetched per page while listing (the catalog's largest page).
_PAGE = 1000


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``list``, ``show``, ``set`` and ``delete-tag`` under ``forkd-hub repo``."""
    listing = commands.add_parser("list", help="list repositories, public and private (of one namespace)")
    listing.add_argument("namespace", metavar="NS", nargs="?", help="only this namespace's repositories")
    listing.add_argument("--json", action="store_true", help="print what GET /api/v1/repositories answers")
    add_store_args(listing)
    listing.set_defaults(func=_list)

    show = commands.add_parser("show", help="show a repository: visibility, description, README, tags, policy")
    show.add_argument("repository", metavar="NS/REPO")
    show.add_argument("--json", action="store_true", help="print what GET /api/v1/repositories/NS/REPO answers")
    add_store_args(show)
    show.set_defaults(func=_show)

    change = commands.add_parser("set", help="change a repository's visibility, description or README")
    change.add_argument("repository", metavar="NS/REPO")
    visibility = change.add_mutually_exclusive_group()
    visibility.add_argument("--public", dest="public", action="store_const", const=True, help="anyone may pull it")
    visibility.add_argument(
        "--private", dest="public", action="store_const", const=False, help="only tokens with pull on it"
    )
    change.add_argument("--description", metavar="TEXT", help="the one-paragraph description (Markdown)")
    change.add_argument(
        "--readme-file",
        "--readme",
        dest="readme",
        metavar="FILE",
        help="the README (Markdown) from FILE, or '-' for stdin",
    )
    change.add_argument("--json", action="store_true", help="print the repository as the API answers it")
    add_store_args(change)
    change.set_defaults(func=_set)

    delete_tag = commands.add_parser("delete-tag", help="delete one tag (audited, like DELETE …/manifests/TAG)")
    delete_tag.add_argument("reference", metavar="NS/REPO:TAG")
    delete_tag.add_argument(
        "--allow-immutable",
        action="store_true",
        help="delete the tag even if the repository's policy makes it immutable (audited as an override)",
    )
    delete_tag.add_argument("--json", action="store_true", help="print what the API's DELETE answers")
    add_store_args(delete_tag)
    delete_tag.set_defaults(func=_delete_tag)


def _operator() -> Principal:
    return Principal.with_scopes(cli_actor(), ["admin"])


def _split(text: str) -> tuple[str, str]:
    """``NS/REPO`` → its two checked parts. Raises HubError(NAME_INVALID)."""
    namespace, _, name = text.partition("/")
    check_repository(namespace, name)
    return namespace, name


def _fail(message: str) -> int:
    print(f"forkd-hub: error: {message}", file=sys.stderr)
    return 1


def _print_json(value: msgspec.Struct) -> None:
    print(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())


def _first_line(text: str, width: int = 60) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _table(items: list[RepositorySummary]) -> list[str]:
    rows = [
        (r.name, "public" if r.public else "private", str(len(r.tags)), r.updated.strftime("%Y-%m-%d %H:%M"))
        for r in items
    ]
    header = ("REPOSITORY", "VISIBILITY", "TAGS", "UPDATED")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row, item in zip([header, *rows], [None, *items], strict=True):
        description = "DESCRIPTION" if item is None else _first_line(item.description)
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + "  " + description)
    return [line.rstrip() for line in lines]


def _list(args: argparse.Namespace) -> int:
    if args.namespace is not None:
        try:
            check_repository(args.namespace, "x")
        except HubError as e:
            return _fail(e.message)

    async def run(hub: HubServices) -> int:
        items: list[RepositorySummary] = []
        last: str | None = None
        while True:
            page = await hub.registry.catalog.repositories(_operator(), namespace=args.namespace, n=_PAGE, last=last)
            items.extend(page.items)
            if page.next_last is None:
                break
            last = page.next_last
        if args.json:
            _print_json(RepositoriesOut.from_page(type(page)(items, None)))
        elif not items:
            where = f" in namespace {args.namespace}" if args.namespace else ""
            print(f"no repositories{where}", file=sys.stderr)
        else:
            print("\n".join(_table(items)))
        return 0

    return run_on_hub(args, run, create=False)


def describe(detail: RepositoryDetail) -> list[str]:
    """A repository as a few human lines (its policy as ``forkd-hub repo policy`` shows it)."""
    from hub_server.cli_repos import describe as describe_policy

    lines = [
        f"{detail.name} ({'public' if detail.public else 'private'}), {len(detail.tags)} tag(s), "
        f"pulled {detail.pull_count} time(s), updated {detail.updated:%Y-%m-%d %H:%M}",
        f"description: {_first_line(detail.description, 200) or '(none)'}",
        f"readme: {len(detail.readme):,} characters" if detail.readme else "readme: (none)",
    ]
    if detail.policy is not None:
        lines += describe_policy(detail.policy)
    lines += [f"  {t.name:<24} {t.digest}" for t in detail.tags]
    return lines


def _show(args: argparse.Namespace) -> int:
    try:
        namespace, name = _split(args.repository)
    except HubError as e:
        return _fail(e.message)

    async def run(hub: HubServices) -> int:
        detail = await hub.registry.catalog.repository(await hub.registry.scope(_operator(), namespace, name, "pull"))
        if args.json:
            _print_json(RepositoryOut.from_detail(detail))
        else:
            print("\n".join(describe(detail)))
        return 0

    return run_on_hub(args, run, create=False)


def _readme(source: str | None) -> str | None:
    """The README text from a file or stdin (``-``). Raises OSError, UnicodeDecodeError (a ValueError)."""
    if source is None:
        return None
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    return text.replace("\r\n", "\n")


def _set(args: argparse.Namespace) -> int:
    if args.public is None and args.description is None and args.readme is None:
        return _fail("nothing to change: give --public or --private, --description or --readme")
    try:
        namespace, name = _split(args.repository)
        readme = _readme(args.readme)
    except HubError as e:
        return _fail(e.message)
    except (OSError, ValueError) as e:
        return _fail(f"cannot read the README {args.readme}: {e}")

    async def run(hub: HubServices) -> int:
        scope = await hub.registry.scope(_operator(), namespace, name, "push")
        detail = await hub.registry.catalog.update(
            scope, public=args.public, description=args.description, readme=readme
        )
        if args.json:
            _print_json(RepositoryOut.from_detail(detail))
        else:
            print("\n".join(describe(detail)[:3]))
        return 0

    return run_on_hub(args, run, create=False)


def _delete_tag(args: argparse.Namespace) -> int:
    repository, _, tag = args.reference.rpartition(":")
    try:
        if not repository or "@" in args.reference:
            raise HubError(
                ErrorCode.NAME_INVALID, f"{args.reference!r} is not NS/REPO:TAG", {"reference": args.reference}
            )
        namespace, name = _split(repository)
        check_tag(tag)
    except HubError as e:
        return _fail(e.message)

    async def run(hub: HubServices) -> int:
        scope = await hub.registry.scope(_operator(), namespace, name, "delete")
        try:
            result = await hub.registry.deletion.delete(
                scope, tag, immutable="override" if args.allow_immutable else "refuse"
            )
        except HubError as e:
            if e.code is not ErrorCode.TAG_IMMUTABLE:
                raise
            return _fail(f"{e.message}: pass --allow-immutable to delete it anyway (the audit log records that)")
        if args.json:
            _print_json(DeleteOut.from_result(result))
        else:
            for removal in result.removed:
                what = f"{removal.repository}:{','.join(removal.tags)}" if removal.tags else removal.repository
                manifest = f" and its manifest {removal.digest}" if removal.digest else ""
                print(f"deleted {what}{manifest}")
        return 0

    return run_on_hub(args, run, create=False)
