"""A threaded ``http.server`` for fake peers (a store, a TLS endpoint) that stays quiet when a client cuts
its connection.

``socketserver`` prints a traceback to stderr for any error in a handler thread, and a handler thread of a
keep-alive connection outlives ``shutdown()``: when the client's pool drops that connection later (during
another test), its ``ConnectionResetError`` lands in that test's captured stderr, where the traceback scan
(tests/conftest.py) rightly fails it. A client cutting a connection is an expected event for these fakes;
any other handler error is still printed.
"""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer
from typing import Any

__all__ = ["QuietHTTPServer"]


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # reset, aborted or broken pipe: the client left
            return
        super().handle_error(request, client_address)
