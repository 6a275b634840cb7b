"""``forkd-hub serve --workers N``: N server processes accepting on one listening socket.

One Python process uses one core for the hub's own work; a host with more cores serves more
requests with more processes. The parent binds the socket, forks N workers (each builds its own
app, database engine and caches, exactly like a replica on the same database) and then only
supervises: SIGTERM or SIGINT is passed on to every worker as SIGTERM (each stops gracefully),
and if a worker ends on its own (it failed to start, or crashed) the others are stopped too and
the parent exits 1, so a service manager restarts the whole set. No worker is restarted in place.

What is per worker (docs/deployment.md, "Workers"): the read caches (a tag moved through one
worker is seen by the others within ``FORKD_HUB_CACHE_TTL``), ``/metrics`` (each scrape is
answered by one worker: counters are that worker's), periodic GC and the webhook delivery loop
(both already safe with replicas: a GC lease, claimed deliveries).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Callable

__all__ = ["run_workers"]

log = logging.getLogger(__name__)


def run_workers(serve_one: Callable[[socket.socket], int], sock: socket.socket, workers: int) -> int:
    """Fork ``workers`` processes that each run ``serve_one(sock)`` (its return is the exit status).

    Returns 0 when every worker stopped with status 0 after a requested stop, else 1.
    """
    children: set[int] = set()
    stopping = False

    def stop_all(*_: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    previous = {sig: signal.signal(sig, stop_all) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for _ in range(workers):
            pid = os.fork()
            if pid == 0:  # the worker: its own event loop, app, engine and caches
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                code = 1
                try:
                    code = serve_one(sock)
                except BaseException:  # a worker must never return into the parent's loop
                    log.exception("worker %d failed", os.getpid())
                finally:
                    logging.shutdown()
                    os._exit(code)
            children.add(pid)
            if stopping:
                stop_all()
        status = 0
        while children:
            pid, wait_status = os.wait()
            children.discard(pid)
            code = os.waitstatus_to_exitcode(wait_status)
            if code != 0 or not stopping:
                if not stopping:
                    log.error("worker %d ended on its own (status %d): stopping the others", pid, code)
                status = 1
                stop_all()
        return status
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
