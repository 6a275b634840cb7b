"""``forkd fork REF --lazy`` (see docs/lazy-fork.md): the CLI side of :mod:`forkd_client.lazy`.

The children run ``--exec`` while their memory is fetched on demand; then, when every chunk they
read was served, the rest is fetched (their page-access order first) and the chain installed as
``forkd pull`` installs it. A chunk that was corrupt or could not be fetched stopped the child
that read it: the command reports the chunk and exits with its class (6 for a corrupt chunk),
installing nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

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
    if args.exec_cmd is None or args.keep:
        raise UsageError(
            "forkd fork --lazy needs --exec CMD (the children's memory is served by this process, which "
            "ends with them); --keep is not supported with --lazy yet: pull first, then fork --keep"
        )
    ref = Reference.parse(args.tag)
    with ctx.store() as store, _client(ref, ctx=None if args.json else ctx) as client:
        lazy = lazy_fork(store, client, ref, args.count, as_tag=args.as_tag, vmm=args.vmm)
        with lazy.session:
            try:
                lazy.forked.run(args.exec_cmd, args.exec_timeout)
            finally:
                lazy.forked.kill()
            failures = bool(lazy.session.image.failures)
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
            f"Served {lazy.session.head_digest} lazily: {before['chunks_fetched']} of {before['chunks']} chunks "
            f"({human_size(before['bytes_fetched'])}) fetched while the children ran, "
            f"{before['chunks_local']} found locally"
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
