"""The e2e tests' traceback scan (issue 16, "Done means"): no captured hub log or CLI output of a
real process may hold a Python traceback. ``HubProcess.stop`` scans the hub's log and
``User.run`` each CLI run's stdout and stderr, so every e2e test goes through it."""

from __future__ import annotations

__all__ = ["assert_no_traceback"]

MARKER = "Traceback (most recent call last)"


def assert_no_traceback(text: str, where: str) -> None:
    """Raise AssertionError quoting the traceback when ``text`` (a log or a process's output) holds one."""
    # A JSON log line escapes the newline after the marker; the marker itself survives as is.
    at = text.find(MARKER)
    if at >= 0:
        raise AssertionError(f"{where} holds a Python traceback:\n{text[max(0, at - 300) : at + 3000]}")
