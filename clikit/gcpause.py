"""The cyclic garbage collector paused while a console script loads its modules.

Loading a server's modules (SQLAlchemy, Litestar, pydantic, the hub's own) creates a few hundred thousand
objects that live as long as the process. Each automatic collection of the oldest generation during that
loading walks all of them again; for ``forkd-hub serve`` that was a fifth to a third of its start-up CPU
(docs/benchmarks.md, "Hub start-up"). Loading creates garbage cycles only in small amounts, so nothing
grows while the collector waits; it runs again as usual when the block ends (and ``serve`` then freezes
what is alive: ``hub_server.app.create_app(freeze_gc=True)``).

:func:`paused_collector` restores the collector's previous state, so a block inside another (or in a test
process, where it stays enabled) leaves it as it found it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused_collector"]


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Within the block, no automatic garbage collection; afterwards the collector as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
