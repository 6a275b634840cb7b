"""``forkd-hub``: the server's command line (``serve``, ``migrate``, ``gc``, plus ``token``, ``audit``, ``webhook``,
``verify``).

Every setting comes from a flag or its ``FORKD_HUB_*`` variable (``hub_server.settings``; table
in docs/deployment.md). ``serve`` runs the app under uvicorn: one JSON log line per request,
graceful stop on SIGTERM/SIGINT (the lifespan closes the database and the store), exit 0.

Exit status: 0 success, 1 a failed command (bad settings, unreachable database …), 2 usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import signal
import socket
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from clikit.gcpause import paused_collector
from clikit.helpdoc import parse_args
from clikit.quickexit import run_and_exit
from clikit.units import human_size
from hub_server import cli_repos, cli_tokens, cli_verify, cli_webhooks
from hub_server.cli_help import HELP, document
from hub_server.compose import HubStartError, open_hub, redacted_url
from hub_server.registry.upkeep.gc import GcReport
from hub_server.settings import Settings, SettingsError, env_name, load_settings, parse_duration

__all__ = ["build_parser", "main"]

_SERVER_FLAGS = (
    "host",
    "port",
    "public_url",
    "forwarded_allow_ips",
    "log_level",
    "gc_interval",
    "workers",
    "cache_ttl",
    "immutable_tags",
    "immutable_exempt",
    "mirror_of",
    "mirror_cache_bytes",
    "mirror_tag_ttl",
    "mirror_auth_ttl",
)
_STORE_FLAGS = ("data_dir", "storage", "database_url")
_SECRET_PARAM = re.compile(r"secret|password|token|key", re.IGNORECASE)


def _add(parser: argparse.ArgumentParser, name: str, help_text: str, **kwargs: Any) -> None:
    flag = "--" + name.replace("_", "-")
    parser.add_argument(flag, dest=name, default=None, help=f"{help_text} [env {env_name(name)}]", **kwargs)


_store_args = cli_tokens.add_store_args


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="forkd-hub", description="Registry and hub for microVM snapshots.")
    parser.add_argument("--version", action="version", version=f"forkd-hub {_release()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser("serve", help="run the hub (HTTP API, OpenAPI at /schema)")
    _add(serve, "host", "address to listen on (default 127.0.0.1)")
    _add(serve, "port", "port to listen on (default 8080; 0 picks a free one)")
    _store_args(serve)
    _add(serve, "public_url", "URL clients use to reach the hub (behind a proxy)", metavar="URL")
    _add(serve, "forwarded_allow_ips", "proxies trusted for X-Forwarded-* (default 127.0.0.1)", metavar="IPS")
    _add(serve, "log_level", "critical|error|warning|info|debug (default info)", metavar="LEVEL")
    _add(serve, "gc_interval", "run garbage collection every SECONDS (e.g. 3600 or 6h; default off)", metavar="SECONDS")
    _add(serve, "workers", "server processes sharing the port, one per core (default 1)", metavar="N")
    _add(
        serve,
        "cache_ttl",
        "seconds another worker or replica may serve a moved tag, a repository made private "
        "or a revoked token (default 2; 0: no caching)",
        metavar="SECONDS",
    )
    _add(
        serve,
        "immutable_tags",
        "true: tags never move to another digest once set, unless a repository says otherwise (default false)",
        metavar="BOOL",
    )
    _add(
        serve, "immutable_exempt", "tag globs that stay movable under immutable tags (default latest)", metavar="GLOBS"
    )
    _add(
        serve,
        "mirror_of",
        "run a read-only pull-through mirror of the hub at URL instead of a registry (docs/mirrors.md)",
        metavar="URL",
    )
    _add(serve, "mirror_cache_bytes", "a mirror's cache size limit, e.g. 200G (default unlimited)", metavar="SIZE")
    _add(
        serve,
        "mirror_tag_ttl",
        "seconds a mirror keeps a tag before asking its upstream again (default 60)",
        metavar="SECONDS",
    )
    _add(
        serve,
        "mirror_auth_ttl",
        "seconds a mirror keeps its upstream's answer to a credential (default 60)",
        metavar="SECONDS",
    )
    serve.set_defaults(func=_serve)

    migrate = commands.add_parser("migrate", help="create or upgrade the database schema")
    _store_args(migrate)
    migrate.set_defaults(func=_migrate)

    gc = commands.add_parser(
        "gc", help="apply retention policies, delete what no tag reaches (older than the grace period)"
    )
    _store_args(gc)
    gc.add_argument(
        "--dry-run",
        action="store_true",
        help="report what would be deleted (tags retention would expire included), delete nothing",
    )
    gc.add_argument(
        "--grace", default=None, help=f"only delete what is older than this (default 1h) [env {env_name('gc_grace')}]"
    )
    gc.add_argument("--json", action="store_true", help="print the report as JSON")
    gc.add_argument(
        "--hold",
        metavar="DURATION",
        help="collect nothing anywhere for DURATION (e.g. 2h): every replica's GC skips; for backups (docs/operations.md)",
    )
    gc.add_argument("--release", action="store_true", help="end a --hold before it runs out")
    gc.set_defaults(func=_gc)

    cli_tokens.register(commands)
    cli_webhooks.register(commands)
    cli_repos.register(commands)
    cli_verify.register(commands)
    document(parser, HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``forkd-hub`` console script."""
    parser = build_parser()
    args = parse_args(parser, None if argv is None else list(argv))
    try:
        return int(args.func(args))
    except (SettingsError, HubStartError) as e:
        print(f"forkd-hub: error: {e}", file=sys.stderr)
        usage = getattr(args, "command_usage", None)
        if isinstance(e, SettingsError) and usage is not None:  # a flag's value was wrong
            sys.stderr.write(usage())
        return 1


def _settings(args: argparse.Namespace, names: Sequence[str], **extra: Any) -> Settings:
    flags = {name: getattr(args, name, None) for name in names}
    return load_settings({**flags, **extra})


def _serve(args: argparse.Namespace) -> int:
    # The app, the ASGI server and (on a new data dir) the migrations load with the collector paused
    # (clikit/gcpause.py: its walks over the modules' objects were a fifth to a third of the start-up's CPU); the app's
    # lifespan then freezes what is alive (create_app(freeze_gc=True)).
    with paused_collector():
        import uvicorn

        from hub_server.app import create_app
        from hub_server.logs import configure_logging

        settings = _settings(args, (*_SERVER_FLAGS, *_STORE_FLAGS))
        configure_logging(settings.log_level.upper())
        asyncio.run(_open_and_close(settings))  # fail fast with one line (bad store, database, schema), not a traceback
    _log_start(settings)

    def config() -> uvicorn.Config:
        with paused_collector():
            app = create_app(settings, freeze_gc=True)
        return uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_config=None,  # keep our JSON logging
            access_log=False,  # hub_server.logs writes one line per request instead
            proxy_headers=True,
            forwarded_allow_ips=settings.forwarded_allow_ips,
            timeout_graceful_shutdown=30,
            lifespan="on",
        )

    if settings.workers == 1:
        return _serve_one(config(), None)
    from hub_server.workers import run_workers

    try:
        return run_workers(lambda own: _serve_one(config(), own), settings.host, settings.port, settings.workers)
    except OSError as e:
        print(f"forkd-hub: error: cannot listen on {settings.host}:{settings.port}: {e.strerror or e}", file=sys.stderr)
        return 1


def _serve_one(config: Any, sock: socket.socket | None) -> int:
    """Run one uvicorn server (on ``sock`` when a parent bound it for several workers); the exit status."""
    import uvicorn

    # uvicorn stops gracefully on SIGTERM/SIGINT, restores the handlers it found and re-raises the
    # signal; with the default handlers that would end the process as "killed". Ours only note it,
    # so a requested stop (lifespan shut down, database and store closed) exits with status 0.
    stops: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda number, _frame: stops.append(number)) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    server = uvicorn.Server(config)
    try:
        server.run(sockets=None if sock is None else [sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started:
        print("forkd-hub: error: the server did not start (see the log above)", file=sys.stderr)
        return 1
    if stops:
        logging.getLogger(__name__).info("stopped by %s", signal.Signals(stops[0]).name)
    return 0


def _release() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("forkd-hub")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without metadata
        return "unknown"


def _log_start(settings: Settings) -> None:
    """One line saying what this process serves, from where (human-readable on a terminal)."""
    release = _release()
    url = f"http://{settings.host}:{settings.port}" if settings.port else f"http://{settings.host} (a free port)"
    public = f" (public URL {settings.public_url})" if settings.public_url else ""
    public += f" with {settings.workers} workers" if settings.workers > 1 else ""
    public += f", a read-only mirror of {settings.mirror_of}" if settings.mirror_of else ""
    database = "none (a mirror keeps no registry)" if settings.mirror_of else redacted_url(settings.database_url)
    storage = " ".join(
        f"{word.split('=', 1)[0]}=***" if "=" in word and _SECRET_PARAM.search(word.split("=", 1)[0]) else word
        for word in settings.storage.split()
    )
    logging.getLogger(__name__).info(
        "forkd-hub %s starting on %s%s; data dir %s; database %s; storage %s",
        release,
        url,
        public,
        settings.data_dir,
        database,
        storage,
        extra={
            "version": release,
            "url": url,
            "public_url": settings.public_url,
            "data_dir": str(settings.data_dir),
            "database": database,
            "storage": storage,
        },
    )


async def _open_and_close(settings: Settings) -> None:
    if settings.mirror_of is not None:  # a mirror keeps no registry: its store and index only
        from hub_server.mirror.app import open_mirror

        async with open_mirror(settings):
            return
    async with open_hub(settings):
        pass


def _migrate(args: argparse.Namespace) -> int:
    from hub_server.db.schema import head_revision

    settings = _settings(args, _STORE_FLAGS)

    async def go() -> list[str]:
        async with open_hub(settings, migrate=True, data_dir=False) as hub:  # a PostgreSQL hub needs no local dir
            return hub.migrations_applied

    applied = asyncio.run(go())
    done = f"applied revision(s) {', '.join(applied)}" if applied else "already up to date"
    print(f"schema revision {head_revision()}: {done}")
    return 0


def _gc(args: argparse.Namespace) -> int:
    settings = _settings(args, _STORE_FLAGS)
    from hub_server.registry.upkeep.gcstate import GcBusy

    if args.hold is not None or args.release:
        return _gc_hold(settings, args)
    grace = parse_duration(args.grace) if args.grace is not None else None
    try:
        report = asyncio.run(_run_gc(settings, grace, args.dry_run))
    except GcBusy as e:
        print(f"forkd-hub: error: {e}; try again later", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    print_retention(report.retention, report.retention_manifests, report.dry_run)
    for kind, items in (
        ("manifest", report.manifests),
        ("blob", report.blobs),
        ("upload", report.uploads),
        ("orphan object", report.orphan_objects),
    ):
        for item in items:
            print(f"{verb} {kind} {item}")
    print(
        f"{verb} {len(report.manifests)} manifest(s), {len(report.blobs)} blob(s), {len(report.uploads)} "
        f"upload(s), {len(report.orphan_objects)} orphan object(s): {human_size(report.bytes_freed)}; kept "
        f"{report.kept_manifests} manifest(s), {report.kept_blobs} blob(s)"
    )
    return 0


def _gc_hold(settings: Settings, args: argparse.Namespace) -> int:
    from hub_server.registry.upkeep.gcstate import GcBusy

    if args.hold is not None and args.release:
        raise SettingsError("--hold and --release: give one")
    duration = parse_duration(args.hold) if args.hold is not None else None
    if duration is not None and duration.total_seconds() <= 0:
        raise SettingsError(f"--hold needs a positive duration, not {args.hold!r}")

    async def go() -> str:
        async with open_hub(settings, create=False) as hub:
            if duration is None:
                released = await hub.registry.gc.release_hold(cli_tokens.cli_actor())
                return "garbage collection resumes" if released else "garbage collection was not held"
            until = await hub.registry.gc.hold(duration, cli_tokens.cli_actor())
            return (
                f"garbage collection held until {until.isoformat(timespec='seconds')}: no replica deletes anything "
                "meanwhile ('forkd-hub gc --release' ends it sooner)"
            )

    try:
        print(asyncio.run(go()))
    except GcBusy as e:
        print(f"forkd-hub: error: {e}; hold once it ends", file=sys.stderr)
        return 1
    return 0


def print_retention(expired: list[dict[str, Any]], released: list[str], dry_run: bool) -> None:
    """The tags retention policies expire(d), as a table, and the manifests only they reached."""
    if not expired:
        return
    print(f"retention {'would remove' if dry_run else 'removed'} {len(expired)} tag(s):")
    rows = [("REPOSITORY", "TAG", "DIGEST", "SET", "WHY")] + [
        (e["repository"], e["tag"], e["digest"][:19] + "…", e["updated"][:19].replace("T", " "), e["reason"])
        for e in expired
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])
    for digest in released:
        print(f"manifest {digest} is reached only by these tags: it goes once unreferenced for the grace period")


async def _run_gc(settings: Settings, grace: timedelta | None, dry_run: bool) -> GcReport:
    async with open_hub(settings, create=False) as hub:
        return await hub.registry.gc.run(grace=grace, dry_run=dry_run, actor=cli_tokens.cli_actor())


def run() -> None:
    """The ``forkd-hub`` console script: :func:`main` on ``sys.argv``, then a quick exit
    (:func:`clikit.quickexit.run_and_exit`: no object-by-object interpreter teardown)."""
    run_and_exit(main)


if __name__ == "__main__":  # pragma: no cover
    run()
