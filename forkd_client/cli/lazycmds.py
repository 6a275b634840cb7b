"""``forkd fork REF --lazy`` (see docs/lazy-fork.md): the CLI side of :mod:`forkd_client.lazy`.

The children run ``--exec`` while their memory is fetched on demand; then, when every chunk they
read was served, the rest is fetched (their page-access order first) and the chain installed as
``forkd pull`` installs it. A chunk that was corrupt or could not be fetched stopped the child
that read it: the command reports the chunk and exits with its class (6 for a corrupt chunk),
installing nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..units import plural
from .output import Context, human_size

if TYPE_CHECKING:
    from ..vmops import Forked


def run_lazy_fork(args: argparse.Namespace, ctx: Context, print_fork: Callable[[Context, Forked, bool], None]) -> int:
    """Raises UsageError (``--lazy`` without ``--exec``, ``--as`` without ``--lazy``), ChunkCorrupt,
    ChunkUnfetchable, LazyUnsupported, the errors of a pull and of a fork."""
    from ..hub.reference import Reference
    from ..lazy.fork import lazy_fork
    from .hub import _client

    if not args.lazy:
        raise UsageError("--as and --save-profile are options of a lazy fork; they need --lazy")
    if args.keep:
        return _run_detached_fork(args, ctx, print_fork)
    if args.exec_cmd is None:
        raise UsageError(
            "forkd fork --lazy needs --exec CMD (the children's memory is then served by this process, "
            "which ends with them) or --keep (served by a detached process until they exit)"
        )
    if args.save_profile and args.keep:
        raise UsageError("--save-profile records what --exec reads; it does not combine with --keep")
    ref = Reference.parse(args.tag)
    with ctx.store() as store, _client(ref, ctx=None if args.json else ctx) as client:
        lazy = lazy_fork(store, client, ref, args.count, as_tag=args.as_tag, vmm=args.vmm, network=args.net)
        with lazy.session:
            try:
                lazy.forked.run(args.exec_cmd, args.exec_timeout)
            finally:
                lazy.forked.kill()
            failures = bool(lazy.session.failures)
            if not failures:
                if args.save_profile:
                    lazy.saved_profile = lazy.session.save_profile()
                lazy.finish()
    if args.json:
        ctx.json(lazy.to_obj())
    else:
        print_fork(ctx, lazy.forked, True)
        before = lazy.stats or lazy.snapshot_stats()
        ctx.print(
            f"Served {lazy.session.head_digest} lazily: {before['chunks_fetched']} of {before['chunks']} "
            f"memory chunks ({human_size(before['bytes_fetched'])}) fetched while the children ran, "
            f"{before['chunks_local']} found locally"
        )
        disk = lazy.rootfs_stats if lazy.stats else lazy.snapshot_rootfs_stats()
        if disk is not None:
            ctx.print(
                f"Root filesystem: {disk['chunks_fetched']} of {disk['chunks']} chunks "
                f"({human_size(disk['bytes_fetched'])}) fetched while the children ran, "
                f"{disk['chunks_local']} found locally"
            )
        ctx.print(f"Working set: {lazy.session.profile_note or 'no access profile'}")
        if lazy.saved_profile:
            ctx.print(f"Saved this fork's access profile on the hub as {lazy.saved_profile}")
        if lazy.installed is not None:
            ctx.print(
                f"Installed {plural(len(lazy.installed.links), 'layer', 'layers')} as {lazy.installed.tag} "
                f"(forkd fork {lazy.installed.tag} now forks it directly)"
            )
    if failures:
        lazy.session.raise_failures()
    return 1 if lazy.forked.failed else 0


def _run_detached_fork(
    args: argparse.Namespace, ctx: Context, print_fork: Callable[[Context, Forked, bool], None]
) -> int:
    """``--lazy --keep``: a detached server serves the image until the children exit (and installs
    the chain once filled); this process starts the children and returns."""
    import time

    from vmm import SnapshotFiles

    from ..vmmcompat import check_host_compat, from_manifest_compat
    from ..vmops.fork import Forked, _spawn
    from ..vmops.host import require_driver

    if args.save_profile:
        raise UsageError("--save-profile records what --exec reads in this process; it does not combine with --keep")
    from ..lazy.serve import ServerFailed

    try:
        server, control, ready = _start_server(args, ctx, children=True)
    except ServerFailed as e:
        ctx.error(str(e))
        return e.exit_code
    pids: list[int] = []
    try:
        rootfs = ready.get("rootfs")
        files = SnapshotFiles(
            Path(ready["memory"]),
            Path(ready["vmstate"]),
            from_manifest_compat(ready["compat"]),
            rootfs=Path(rootfs) if rootfs else None,
        )
        driver = require_driver(args.vmm or files.compat.vmm)
        check_host_compat(ready["compat"], driver, memory=files.memory, what=args.tag)  # type: ignore[arg-type]
        started = time.monotonic()
        children = _spawn(driver, files, args.count, args.net)
        forked = Forked(
            ready["tag"], list(ready["chain"]), 0.0, (time.monotonic() - started) * 1000, str(files.memory), children
        )
        try:
            if args.exec_cmd is not None:
                forked.run(args.exec_cmd, args.exec_timeout)
            forked.measure()
            forked.detach()
        finally:
            if not forked.kept:
                forked.kill()
        pids = [c.vm.pid for c in forked.children]
    finally:
        _write_children(control, pids)  # the server goes on (fill, install) either way
    if args.json:
        ctx.json({**forked.to_obj(), "server": {"pid": server.pid, "control": str(control)}})
    else:
        print_fork(ctx, forked, args.exec_cmd is not None)
        ctx.print(
            f"{'Memory and disk' if ready.get('rootfs') else 'Memory'} served lazily by pid {server.pid} "
            "until the children exit; the chain is installed as "
            f"{ready['tag']} once filled (log: {control / 'server.log'})"
        )
    return 1 if forked.failed else 0


def run_lazy_pull(args: argparse.Namespace, ctx: Context) -> int:
    """``forkd pull REF --lazy``: a detached server mounts the head's memory image (and root
    filesystem) and fills them in the background, installing the chain once filled; returns once
    they are mounted."""
    if args.verify_key or args.hub:
        raise UsageError("pull --lazy takes a hub reference, without --verify-key or --hub")
    from ..lazy.serve import ServerFailed

    try:
        server, control, ready = _start_server(args, ctx, children=False)
    except ServerFailed as e:
        ctx.error(str(e))
        return e.exit_code
    if args.json:
        ctx.json({**ready, "server": {"pid": server.pid, "control": str(control)}})
    else:
        disk = f", root filesystem at {ready['rootfs']}" if ready.get("rootfs") else ""
        ctx.print(
            f"{args.ref}: memory image mounted at {ready['memory']}{disk}; filling in the background "
            f"(pid {server.pid}), installed as {ready['tag']} when complete (log: {control / 'server.log'})"
        )
    return 0


def _start_server(args: argparse.Namespace, ctx: Context, *, children: bool) -> tuple[Any, Path, dict[str, Any]]:
    """Start the detached server and wait until it mounted the image. Raises ServerFailed.

    Its control directory is ``<store>/.staging/lazy-<hex>`` (never the system temp dir), locked (flock) from
    before the server starts until it exits: the server removes it once it has installed the chain; after a
    failure it stays, with the server's log, until ``forkd prune`` (which skips a locked one)."""
    import os

    from ..hub.reference import Reference
    from ..lazy.serve import control_directory, start_server, wait_ready
    from .hub import _client

    ref = Reference.parse(args.ref if hasattr(args, "ref") else args.tag)
    with ctx.store() as store, _client(ref, ctx=None if args.json else ctx) as client:
        control, lock = control_directory(store.staging_root)
        try:  # the server inherits the lock and holds it while it runs
            server = start_server(
                str(ref),
                client.base_url,
                client.token,
                store.root,
                control,
                as_tag=args.as_tag,
                children=children,
                hold_fd=lock,
            )
        finally:
            os.close(lock)
    return server, control, wait_ready(server, control)


def _write_children(control: Path, pids: list[int]) -> None:
    from manifest.fileops import write_atomically

    write_atomically(control / "children.json", json.dumps({"pids": pids}))
