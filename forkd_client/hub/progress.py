"""Progress reporting for long transfers: rich bars on a terminal, plain lines otherwise.

The transfer engine only calls :class:`Progress`'s four methods, so tests pass
:class:`NullProgress` (or a recording one) and the CLI picks with :func:`make_progress`.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """A no-op base; subclasses render."""

    def task(self, description: str, total: int) -> None:
        """Begin a task of ``total`` bytes (ends the previous one)."""

    def advance(self, nbytes: int) -> None:
        """``nbytes`` more bytes done in the current task."""

    def log(self, message: str) -> None:
        """A line worth showing even without a bar (skipped link, reused chunks…)."""

    def close(self) -> None:
        """Finish rendering."""


class NullProgress(Progress):
    """Shows nothing (``--quiet`` and tests)."""


class LineProgress(Progress):
    """Quiet, line-oriented output for logs and pipes: one line per task and per message."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self._desc: str | None = None
        self._total = self._done = 0
        self._start = 0.0

    def _finish(self) -> None:
        if self._desc is not None:
            seconds = max(time.monotonic() - self._start, 1e-9)
            rate = self._done / seconds / (1 << 20)
            print(f"{self._desc}: {self._done:,} bytes in {seconds:.2f}s ({rate:.1f} MiB/s)", file=self.stream, flush=True)
        self._desc = None

    def task(self, description: str, total: int) -> None:
        self._finish()
        self._desc, self._total, self._done, self._start = description, total, 0, time.monotonic()

    def advance(self, nbytes: int) -> None:
        self._done += nbytes

    def log(self, message: str) -> None:
        print(message, file=self.stream, flush=True)

    def close(self) -> None:
        self._finish()


class RichProgress(Progress):
    """Bars with bytes, rate and ETA (rich), for terminals."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress as Bars, TimeRemainingColumn, TransferSpeedColumn

        self._bars = Bars("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                          TransferSpeedColumn(), TimeRemainingColumn(), console=Console(file=stream), transient=False)
        self._bars.start()
        self._task = None

    def task(self, description: str, total: int) -> None:
        if self._task is not None:
            self._bars.update(self._task, completed=self._bars.tasks[-1].total)
        self._task = self._bars.add_task(description, total=max(total, 1))

    def advance(self, nbytes: int) -> None:
        if self._task is not None:
            self._bars.advance(self._task, nbytes)

    def log(self, message: str) -> None:
        self._bars.console.print(message, highlight=False, markup=False)

    def close(self) -> None:
        if self._task is not None:
            self._bars.update(self._task, completed=self._bars.tasks[-1].total)
        self._bars.stop()


def make_progress(*, quiet: bool = False, stream: TextIO = sys.stderr) -> Progress:
    if quiet:
        return NullProgress()
    if stream.isatty():
        return RichProgress(stream)
    return LineProgress(stream)
