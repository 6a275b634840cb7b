"""``forkd-hub serve --workers N``: N server processes accepting on one listening socket.

One Python process uses one core for the hub's own work; a host with more cores serves more
requests with more processes. The parent reserves the port, forks N workers that each bind their
own listening socket to it with ``SO_REUSEPORT`` (so the kernel spreads connections evenly; with
one shared socket the busiest worker's loop accepted most of them) and build their own app,
database engine and caches, exactly like replicas on the same database. Then it only
supervises: SIGTERM or SIGINT is passed on to every worker as SIGTERM (each stops gracefully),
and if a worker ends on its own (it failed to start, or crashed) the others are stopped too and
the parent exits 1, so a service manager restarts the whole set. No worker is restarted in place.

What is per worker (docs/deployment.md, "Workers"): the read caches (a tag moved through one
worker is seen by the others within ``FORKD_HUB_CACHE_TTL``), ``/metrics`` (each scrape is
answered by one worker: counters are that worker's), periodic GC and the webhook delivery loop
(both already safe with replicas: a GC lease, claimed deliveries).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from collections.abc import Callable

__all__ = ["run_workers"]

log = logging.getLogger(__name__)


def port_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT`` (port 0: a free one), not listening yet.

    Raises: OSError (the address is in use by a socket without SO_REUSEPORT, or cannot be bound).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def run_workers(serve_one: Callable[[socket.socket], int], host: str, port: int, workers: int) -> int:
    """Reserve ``host:port``, fork ``workers`` processes that each run ``serve_one(own socket)``
    (its return is the worker's exit status).

    Returns 0 when every worker stopped with status 0 after a requested stop, else 1.
    Raises: OSError when the port cannot be reserved (nothing was started).
    """
    reserved = port_socket(host, port)  # holds the port (and fixes a free one); never listens
    port = reserved.getsockname()[1]
    children: set[int] = set()
    stopping = False

    def stop_all(*_: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop_all) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for _ in range(workers):
            pid = os.fork()
            if pid == 0:  # the worker: its own event loop, app, engine and caches
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
                code = 1
                try:
                    reserved.close()
                    code = serve_one(port_socket(host, port))
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
        reserved.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
