"""What the node agent keeps in ``<store>/node/`` (docs/placement.md, "The node agent").

``state.json``: what the hub acknowledged last (hub, host, generation, the layers it holds for this host,
layers it refused and when, the store change counter that report reflected); ``rate.json``: the download
rate the last large ``forkd pull`` measured here; ``partials.json``: the bitmaps of staged files, by their
inode, size and mtime (``inventory.py``); ``agent.lock``: held by ``forkd node serve``.

Kept apart from the reporting machinery so ``forkd pull`` records its rate without importing it.

Errors: none (a missing or unreadable file reads as empty; a failed write is ignored: these are hints).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from manifest.fileops import write_atomically

if TYPE_CHECKING:
    from ..store import SnapshotStore

__all__ = ["STATE_FILE", "measured_rate", "node_dir", "read_state", "record_pull_rate", "write_state"]

STATE_FILE = "state.json"
RATE_FILE = "rate.json"
#: Transfers smaller than this say little about the link's rate.
MIN_RATE_BYTES = 8 << 20


def node_dir(store: SnapshotStore) -> Path:
    """Where the node agent keeps its state: ``<store>/node``."""
    return store.root / "node"


def read_state(store: SnapshotStore) -> dict[str, Any]:
    """What the last report left in ``state.json`` (empty when there was none)."""
    try:
        state = json.loads((node_dir(store) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def write_state(store: SnapshotStore, state: dict[str, Any]) -> None:
    """Replace ``state.json``. Raises OSError."""
    node_dir(store).mkdir(parents=True, exist_ok=True)
    write_atomically(node_dir(store) / STATE_FILE, json.dumps(state, indent=1))


def record_pull_rate(store: SnapshotStore, nbytes: int, seconds: float) -> None:
    """Remember the download rate a pull of ``nbytes`` in ``seconds`` achieved (large pulls only)."""
    if nbytes < MIN_RATE_BYTES or seconds <= 0:
        return
    try:
        node_dir(store).mkdir(parents=True, exist_ok=True)
        write_atomically(node_dir(store) / RATE_FILE, json.dumps({"bytes_per_second": int(nbytes / seconds)}))
    except OSError:
        pass  # a hint for placement, never a reason to fail a pull


def measured_rate(store: SnapshotStore) -> int | None:
    """The rate :func:`record_pull_rate` kept, in bytes per second, if any."""
    try:
        rate = json.loads((node_dir(store) / RATE_FILE).read_text()).get("bytes_per_second")
    except (OSError, ValueError, AttributeError):
        return None
    return rate if isinstance(rate, int) and rate > 0 else None
