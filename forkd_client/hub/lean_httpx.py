"""httpx (and httpcore) for the hub client, imported without what the client never runs.

Every ``forkd pull`` pays its imports before its first request, and two optional imports of the
HTTP stack cost about 0.1 s of that on the bench machine, for nothing the client uses:

- httpx's package imports its own command-line tool (``httpx._main``: click, rich, pygments,
  ~55 ms) whenever click is installed; the client never runs that tool.
- httpcore imports trio (~50 ms) whenever it is installed (pyfuse3, for ``fork --lazy``, brings
  it), to pick locks when it runs async under trio; the client's HTTP is synchronous.

Both imports are guarded by ``except ImportError`` in those packages, so this module imports
them with ``click`` and ``trio`` made unimportable for the length of that import only
(:func:`_hidden`): httpx then stubs its CLI entry point, httpcore its trio back-end. Afterwards
both stay importable as usual (``rich`` for progress bars, trio for FUSE). A name already
imported is left alone: the imports are then what they would have been.

Use ``from .lean_httpx import httpx`` wherever the client imports httpx, so that whichever
module imports it first imports it this way.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

#: what httpx and httpcore import only for what the client never does: (module, what imports it)
SKIPPED = (("click", "httpx"), ("trio", "httpcore"))

__all__ = ["SKIPPED", "httpx"]


@contextlib.contextmanager
def _hidden(name: str) -> Iterator[None]:
    """Within the block, ``import name`` raises ImportError, unless ``name`` is imported already."""
    if name in sys.modules:
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not importable" marker
    try:
        yield
    finally:
        if name in sys.modules and sys.modules[name] is None:
            del sys.modules[name]


for _name, _importer in SKIPPED:
    with _hidden(_name):
        __import__(_importer)

import httpx  # noqa: E402  # imported just above, without its CLI
