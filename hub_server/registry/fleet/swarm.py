"""Who is pulling which layer now: the hub's swarm tracker (docs/mirrors.md, "A fleet with peers", the swarm).

A pull with peers asks the peers route with ``pulling: true`` and its ``host`` name; :meth:`SwarmTracker.join`
records that this host pulls these layers now (an entry per (layer, host), expiring :data:`ENTRY_TTL_S` after the
last ask), and :meth:`SwarmTracker.members` lists the hosts pulling a layer. The caller (:mod:`.peers`) keeps only
hosts with a fresh report and a ``peerUrl`` and sorts them by name, so every member computes the same split.

**Cohort window**: the first ask for a layer with no live entries opens a window of ``window`` seconds
(``FORKD_HUB_SWARM_WINDOW``, default 1 s; 0 disables); :meth:`SwarmTracker.wait_for_cohort` holds an ask made
in the window until it closes (at most the shorter window the asker allows), so the hosts that start together
all get the same member list. At most :data:`MAX_WAITERS` asks wait per layer; the next ones are answered at
once. Asks after the window get the current list.

Bounds: at most :data:`MAX_ENTRIES` entries in all (the oldest refreshed dropped first) and
:data:`SWARM_PER_LAYER` members answered per layer.

**Per process**: the tracker lives in one hub process's memory. A fleet behind several replicas simply finds
fewer swarm members per pull (each replica tracks the pullers it answered): the pull is still correct, it
moves more bytes from the hub.

Errors: none; the caller checks the question (:func:`.peers.check_peer_question`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

__all__ = ["ENTRY_TTL_S", "MAX_ENTRIES", "MAX_WAITERS", "SWARM_PER_LAYER", "SwarmTracker"]

#: Seconds a host counts as pulling a layer after its last ask.
ENTRY_TTL_S = 120.0
#: (layer, host) entries tracked at most; the least recently refreshed is dropped first.
MAX_ENTRIES = 100_000
#: Members answered per layer at most (the first by host name).
SWARM_PER_LAYER = 64
#: Asks held for one layer's cohort window at most.
MAX_WAITERS = 256


class SwarmTracker:
    """The hosts pulling each layer now, and each layer's cohort window (module docstring). One event loop."""

    def __init__(self, window: float = 1.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.window = max(0.0, window)
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], float] = OrderedDict()  # (layer, host) -> expires at
        self._layers: dict[str, dict[str, float]] = {}  # layer -> host -> expires at
        self._windows: dict[str, float] = {}  # layer -> when its cohort window closes
        self._waiting: dict[str, int] = {}

    def join(self, host: str, layers: Iterable[str]) -> None:
        """Record that ``host`` pulls ``layers`` now (opening a window for a layer nobody pulls)."""
        now = self.clock()
        for layer in layers:
            if not self._live(layer, now) and self.window > 0:
                self._windows[layer] = now + self.window
            expires = now + ENTRY_TTL_S
            self._entries[(layer, host)] = expires
            self._entries.move_to_end((layer, host))
            self._layers.setdefault(layer, {})[host] = expires
        while len(self._entries) > MAX_ENTRIES:
            (layer, host), _ = self._entries.popitem(last=False)
            self._forget(layer, host)

    async def wait_for_cohort(self, layers: Iterable[str], most: float | None = None) -> None:
        """Sleep until the open cohort windows of ``layers`` close (at most ``most`` seconds)."""
        now = self.clock()
        counted = [layer for layer in dict.fromkeys(layers) if self._windows.get(layer, now) > now]
        counted = [layer for layer in counted if self._waiting.get(layer, 0) < MAX_WAITERS]
        if not counted:
            return
        delay = max(self._windows[layer] for layer in counted) - now
        if most is not None:
            delay = min(delay, most)
        for layer in counted:
            self._waiting[layer] = self._waiting.get(layer, 0) + 1
        try:
            await asyncio.sleep(max(0.0, delay))
        finally:
            for layer in counted:
                left = self._waiting[layer] - 1
                if left:
                    self._waiting[layer] = left
                else:
                    del self._waiting[layer]

    def members(self, layer: str) -> list[str]:
        """The hosts pulling ``layer`` now, sorted by name."""
        now = self.clock()
        return sorted(h for h, expires in self._layers.get(layer, {}).items() if expires > now)

    def _live(self, layer: str, now: float) -> bool:
        hosts = self._layers.get(layer)
        if hosts is None:
            return False
        for host in [h for h, expires in hosts.items() if expires <= now]:
            self._entries.pop((layer, host), None)
            self._forget(layer, host)
        return layer in self._layers

    def _forget(self, layer: str, host: str) -> None:
        hosts = self._layers.get(layer)
        if hosts is not None:
            hosts.pop(host, None)
            if not hosts:
                del self._layers[layer]
                self._windows.pop(layer, None)
