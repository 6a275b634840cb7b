"""Helpers for the fleet-peer tests: a store holding a pulled chain, and its peer server on 127.0.0.1 in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forkd_client.node.peers import PeerService, bind_listener

FLEET_TOKEN = "fleet-secret-for-tests"


@contextmanager
def peer_server(store_root: Path, token: str = FLEET_TOKEN, **kw: object) -> Iterator[PeerService]:
    """A PeerService for ``store_root`` on 127.0.0.1 (a free port), its loop on a thread; stopped as the agent stops it."""
    lines: list[str] = []
    service = PeerService(store_root, bind_listener("127.0.0.1:0"), token, lines.append, **kw)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, asyncio.Event] = {}

    async def main() -> None:
        holder["stop"] = asyncio.Event()
        started.set()
        await service.run(holder["stop"])

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10), "the peer server's loop did not start"
    try:
        yield service
    finally:
        loop.call_soon_threadsafe(holder["stop"].set)
        thread.join(10)
        assert not thread.is_alive(), f"the peer server did not stop: {lines}"
        loop.close()
        service.lines = lines  # type: ignore[attr-defined]
