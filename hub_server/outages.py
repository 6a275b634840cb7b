"""The hub's dependencies (the database, the blob store) going down and coming back: noticed, logged once.

Whoever talks to a dependency reports what it saw to the one :class:`Outages` of the process (built by
``compose.open_hub``, on ``RegistryContext.outages``): the exception mapper when a request failed on it, the
webhook delivery loop and periodic GC on every round, ``/healthz`` on every probe. Only a change of state is
logged: one WARNING line when a dependency goes down (with the reason), one INFO line when it answers again
(with how long it was out), so an hour without PostgreSQL is two lines, not a traceback every two seconds.

Metrics (``hub_server.metrics``): ``forkd_hub_dependency_up{dependency}`` (1 or 0) and
``forkd_hub_dependency_errors_total{dependency}`` (failures seen, one per report).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from hub_server.metrics import HubMetrics

__all__ = ["DATABASE", "DEPENDENCIES", "STORAGE", "Outages"]

log = logging.getLogger(__name__)

DATABASE = "database"
STORAGE = "storage"
DEPENDENCIES = (DATABASE, STORAGE)


@dataclass
class _Down:
    since: float
    reason: str


class Outages:
    """Which dependencies are down now, as this process last saw them."""

    def __init__(self, metrics: HubMetrics | None = None) -> None:
        self._metrics = metrics
        self._down: dict[str, _Down] = {}
        self._lock = threading.Lock()
        if metrics is not None:
            for dependency in DEPENDENCIES:
                metrics.dependency_up.labels(dependency=dependency).set(1)

    def failed(self, dependency: str, reason: str) -> None:
        """``dependency`` refused or did not answer; logs when it was up until now."""
        with self._lock:
            first = dependency not in self._down
            if first:
                self._down[dependency] = _Down(time.monotonic(), reason)
        if self._metrics is not None:
            self._metrics.dependency_errors.labels(dependency=dependency).inc()
            self._metrics.dependency_up.labels(dependency=dependency).set(0)
        if first:
            log.warning("%s unavailable: %s", dependency, reason, extra={"dependency": dependency, "state": "down"})

    def recovered(self, dependency: str) -> None:
        """``dependency`` answered; logs when it was down until now."""
        with self._lock:
            down = self._down.pop(dependency, None)
        if down is None:
            return
        if self._metrics is not None:
            self._metrics.dependency_up.labels(dependency=dependency).set(1)
        seconds = time.monotonic() - down.since
        log.info(
            "%s available again after %.1f s",
            dependency,
            seconds,
            extra={"dependency": dependency, "state": "up", "down_seconds": round(seconds, 1)},
        )

    def is_down(self, dependency: str) -> bool:
        with self._lock:
            return dependency in self._down

    def reason(self, dependency: str) -> str | None:
        """The reason reported when ``dependency`` went down, or None while it is up."""
        with self._lock:
            down = self._down.get(dependency)
        return down.reason if down is not None else None
