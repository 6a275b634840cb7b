"""End a command-line process without tearing the interpreter down object by object.

When a command is done, CPython's normal exit clears every module and frees every object one by
one; for a command that imported an HTTP client, a crypto library and a database layer and held
a pull's chunk maps, that is 0.1-0.2 s of CPU after the last byte of output (measured in
docs/benchmarks.md, "Start-up and exit of a pull"). :func:`run_and_exit` runs the command, then
does what a normal exit must do and nothing more: run the ``atexit`` handlers (logging flushes
its handlers there, ``weakref.finalize`` cleans up temporary directories), flush every file
object still open (a normal exit flushes those a module-level name holds when it clears the
modules; this also flushes those only a reference cycle holds, which a normal exit may lose),
flush stdout and stderr, and ``os._exit`` with the command's status.

It only takes that shortcut when nothing else is running: while another non-daemon thread is
alive, a normal ``sys.exit`` waits for it as Python always does. Tests call the commands'
``main`` functions directly, never this.
"""

from __future__ import annotations

import atexit
import gc
import io
import os
import sys
import threading
from collections.abc import Callable

__all__ = ["run_and_exit"]


def run_and_exit(main: Callable[[], int]) -> None:
    """Run ``main`` and end the process with its status (see the module docstring). Never returns.
    An exception ``main`` lets through (a bug, or Ctrl-C outside its handlers) takes the normal
    path, traceback and all."""
    code = main()
    if _others_running():
        sys.exit(code)
    atexit._run_exitfuncs()  # noqa: SLF001 - the documented handlers, run as a normal exit would
    _flush_open_files()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe (``forkd … | head``): as CPython's own exit does
        code = code or 120
    os._exit(code)


def _flush_open_files() -> None:
    """Flush every file object still open (stdout and stderr are flushed after, and judged),
    those a ``gc.freeze`` hid from the collector too (``forkd-hub serve`` freezes at start-up)."""
    gc.unfreeze()
    for obj in gc.get_objects():
        if isinstance(obj, io.IOBase) and obj not in (sys.stdout, sys.stderr):
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:  # noqa: BLE001, S112 - a file that cannot be flushed would fail a normal exit's flush too
                continue


def _others_running() -> bool:
    """Whether a non-daemon thread other than this one is still alive (a normal exit joins it)."""
    me = threading.current_thread()
    return any(t is not me and t.is_alive() and not t.daemon for t in threading.enumerate())
