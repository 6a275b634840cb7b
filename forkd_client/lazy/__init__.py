"""Lazy fork (``forkd fork REF --lazy``): children start from a hub chain before it has finished
downloading. See docs/lazy-fork.md.

- :mod:`.plan`: where each chunk of the head's memory image comes from; coalesced requests;
- :mod:`.image`: the staged image + present-bitmap, filled on demand, verified chunk by chunk;
- :mod:`.fusefs`: the read-only FUSE file the VMM maps;
- :mod:`.session`: resolve + verify like a pull, stage, mount, fill, install through ChainPull;
- :mod:`.fork`: the children; :mod:`.errors`: the error types.
"""

from __future__ import annotations

from .errors import ChunkCorrupt, ChunkFailure, ChunkUnfetchable, LazyUnsupported
from .fork import LazyFork, lazy_fork
from .session import LazySession

__all__ = [
    "ChunkCorrupt",
    "ChunkFailure",
    "ChunkUnfetchable",
    "LazyFork",
    "LazySession",
    "LazyUnsupported",
    "lazy_fork",
]
