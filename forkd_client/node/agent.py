"""``forkd node serve``: the long-running node agent of one store (docs/placement.md, "The node agent").

Process model: one process per store (``<store>/node/agent.lock``, flock: a second agent on the same
store is refused, naming the first one's pid), one asyncio event loop, and on it one task per
**service**: an object with a ``name`` and ``async run(stop)`` that returns when ``stop`` is set.
SIGTERM and SIGINT set ``stop``; every service then finishes what it is doing and returns, and the
agent exits 0. A service that fails stops the others and the agent (exit 1, its error logged).

Services today:

- :class:`ReportService`: watches the store's change counter (``<store>/.changes``, bumped by every
  install, removal and prune, whichever process made it) every ``poll`` seconds and reports once it
  has settled, and sends a report every ``heartbeat`` seconds anyway (an empty delta when nothing
  changed: the hub's TTL only needs to hear from the host). Reports run on a worker thread (they do
  blocking HTTP and may hash staged files), so other services on the loop keep answering. A failed
  report is logged and retried with backoff (doubling from ``poll``, at most ``heartbeat``).

- :class:`~forkd_client.node.peers.PeerService` (``forkd node serve --peer-listen HOST:PORT``, off by
  default): a listener serving this store's verified chunks to fleet peers holding the fleet token; its
  reads and hashing run on a thread of its own, and its URL is what the reports name as ``peerUrl``.

Errors: :class:`AgentBusy` (another agent serves the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from ..errors import ClientError
from ..store import SnapshotStore
from .report import Reporter, ReportOutcome
from .state import node_dir

__all__ = ["AgentBusy", "AgentService", "NodeAgent", "ReportService"]

LOCK_FILE = "agent.lock"
Log = Callable[[str], None]


class AgentBusy(ClientError):
    """Another ``forkd node serve`` already serves this store."""


class AgentService(Protocol):
    """One service of the agent (module docstring)."""

    name: str

    async def run(self, stop: asyncio.Event) -> None: ...


class NodeAgent:
    """Runs ``services`` on one loop for ``store`` until SIGTERM/SIGINT (module docstring)."""

    def __init__(self, store: SnapshotStore, services: Sequence[AgentService], log: Log) -> None:
        self.store, self.services, self.log = store, list(services), log

    def run(self) -> int:
        """Serve until stopped; 0 after a signal, 1 when a service failed. Raises AgentBusy."""
        with self._locked():
            return asyncio.run(self._main())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        directory = node_dir(self.store)
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                raise AgentBusy(
                    f"another node agent (pid {other}) already serves {self.store.root}; stop it first"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)

    async def _main(self) -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        tasks = {asyncio.create_task(service.run(stop), name=service.name): service for service in self.services}
        self.log(f"serving {self.store.root} ({', '.join(s.name for s in self.services)}); pid {os.getpid()}")
        failed = False
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception() is not None:
                        failed = True
                        self.log(f"{tasks[task].name} failed: {task.exception()}")
                        stop.set()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        self.log("stopped")
        return 1 if failed else 0


class ReportService:
    """Reports the store's inventory on change and on a heartbeat (module docstring)."""

    name = "reporter"

    def __init__(
        self,
        reporter: Reporter,
        store: SnapshotStore,
        log: Log,
        *,
        heartbeat: float = 60.0,
        poll: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reporter, self.store, self.log = reporter, store, log
        self.heartbeat, self.poll, self._clock = heartbeat, poll, clock

    async def run(self, stop: asyncio.Event) -> None:
        reported: int | None = None  # the change counter the last report reflects
        seen = self.store.changes()
        next_beat = self._clock()  # report at once
        backoff = self.poll
        while not stop.is_set():
            now_changes = self.store.changes()
            settled = now_changes == seen  # unchanged for one poll: a pull's links are in
            seen = now_changes
            if (settled and now_changes != reported) or self._clock() >= next_beat:
                try:
                    outcome = await asyncio.to_thread(self.reporter.report)
                except (ClientError, OSError) as e:
                    self.log(f"report failed: {e}; retrying in {backoff:g} s")
                    next_beat = self._clock() + backoff
                    backoff = min(backoff * 2, self.heartbeat)
                else:
                    reported, backoff = outcome.changes, self.poll
                    next_beat = self._clock() + self.heartbeat
                    self.log(describe(outcome))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll)


def describe(outcome: ReportOutcome) -> str:
    """One line for people about a report."""
    refused = f"; {len(outcome.refused)} layer(s) left out (refused by the hub)" if outcome.refused else ""
    return (
        f"reported {outcome.layers} layer(s) and {outcome.partial} partial layer(s) to {outcome.hub} as "
        f"{outcome.host} ({outcome.mode}, generation {outcome.generation}){refused}"
    )
