"""An in-process hub served over real HTTP: ``create_app(settings)`` under uvicorn on 127.0.0.1, in a thread.

For tests that need a hub reachable by URL (a mirror's upstream) without starting a process (the unit tier
starts none). ``ServedHub(settings)`` starts it and waits until it listens; ``url``, ``token(name, *scopes)``,
``stop()``. The server's loop runs in its thread; ``call(coro)`` runs a coroutine there.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvicorn

from hub_server.app import create_app
from hub_server.settings import Settings
from tests.services.readiness import wait_ready

T = TypeVar("T")


class ServedHub:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="on", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"served-hub-{self.port}", daemon=True)
        self._thread.start()
        wait_ready(
            lambda: self.server.started or self._failed is not None or not self._thread.is_alive(),
            what=f"hub on {self.url}",
        )
        if not self.server.started:
            raise RuntimeError(f"the served hub did not start: {self._failed!r}")

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self.server.serve(sockets=[self._sock]))
        except BaseException as e:  # noqa: BLE001 - reported by the constructor
            self._failed = e
        finally:
            self.loop.close()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def token(self, name: str, *scopes: str) -> str:
        return self.call(self.app.state.tokens.create(name, list(scopes), None))

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()
