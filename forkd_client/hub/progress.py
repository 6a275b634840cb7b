"""Progress reporting for long transfers: rich bars on a terminal, plain lines otherwise.

The transfer engine only calls :class:`Progress`'s four methods, so tests pass
:class:`NullProgress` (or a recording one) and the CLI picks with :func:`make_progress`.
Sizes are IEC (MiB). Piped output (logs, CI) gets a line every ``FORKD_PROGRESS_INTERVAL``
seconds (default 5) while a task runs, not only at its end: a ticker thread prints it even when
no byte moved since (one upload request of a big layer on a slow link, a stalled hub), so a CI
log never goes quiet long enough to look hung. ``close(finished=False)`` (an
interrupt, a failure, a refusal) leaves every bar where it was instead of filling it, and the line says which
(``stopped``: ``interrupted at``, ``stopped at``, ``refused by the hub after``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

from clikit.units import human_size

if TYPE_CHECKING:
    from rich.progress import Task, TaskID

DEFAULT_INTERVAL = 5.0
#: how a piped line ends a task that did not finish (``close(finished=False, stopped=…)``)
INTERRUPTED = "interrupted at"
FAILED = "stopped at"
REFUSED = "refused by the hub after"


def line_interval() -> float:
    """Seconds between piped progress lines (``FORKD_PROGRESS_INTERVAL``, default 5)."""
    try:
        return max(0.1, float(os.environ.get("FORKD_PROGRESS_INTERVAL", DEFAULT_INTERVAL)))
    except ValueError:
        return DEFAULT_INTERVAL


class Progress:
    """A no-op base; subclasses render."""

    def task(self, description: str, total: int) -> None:
        """Begin a task of ``total`` bytes (ends the previous one)."""

    def advance(self, nbytes: int) -> None:
        """``nbytes`` more bytes done in the current task."""

    def busy(self, description: str) -> None:
        """Begin a step whose length is unknown (computing a layer); it ends with the next task.
        Piped output says it is still working every interval; bars show nothing."""

    def log(self, message: str) -> None:
        """A line worth showing even without a bar (skipped link, reused chunks…)."""

    def close(self, *, finished: bool = True, stopped: str = INTERRUPTED) -> None:
        """Finish rendering; ``finished=False`` shows the current task where it stopped, saying how (``stopped``)."""


class NullProgress(Progress):
    """Shows nothing (``--quiet`` and tests)."""


class LineProgress(Progress):
    """Line-oriented output for logs and pipes: a line every interval while a task runs, one at its end."""

    def __init__(self, stream: TextIO = sys.stderr, interval: float | None = None) -> None:
        self.stream = stream
        self.interval = line_interval() if interval is None else interval
        self._desc: str | None = None
        self._busy = False
        self._total = self._done = 0
        self._start = self._last = 0.0
        self._lock = threading.Lock()  # the ticker thread and the transfer both print
        self._closed = threading.Event()
        self._ticker: threading.Thread | None = None

    def _tick(self) -> None:
        """Print an ``at`` line whenever a task ran ``interval`` seconds without one."""
        while not self._closed.wait(min(self.interval, 1.0) / 2):
            with self._lock:
                if self._desc is not None and time.monotonic() - self._last >= self.interval:
                    self._last = time.monotonic()
                    self._line("at")

    def _line(self, state: str) -> None:
        seconds = max(time.monotonic() - self._start, 1e-9)
        if self._busy:
            said = {"at": "still working after", "done,": "done in"}.get(state, state.removesuffix(" at"))
            said = said if said.endswith((" after", " in")) else f"{said} after"
            print(f"{self._desc}: {said} {seconds:.1f}s", file=self.stream, flush=True)
            return
        of = f" of {human_size(self._total)}" if self._total else ""
        print(
            f"{self._desc}: {state} {human_size(self._done)}{of} in {seconds:.1f}s "
            f"({human_size(self._done / seconds)}/s)",
            file=self.stream,
            flush=True,
        )

    def _finish(self, finished: bool = True, stopped: str = INTERRUPTED) -> None:
        if self._desc is not None:
            self._line("done," if finished else stopped)
        self._desc = None

    def task(self, description: str, total: int, *, busy: bool = False) -> None:
        with self._lock:
            self._finish()
            self._desc, self._total, self._done, self._busy = description, total, 0, busy
            self._start = self._last = time.monotonic()
        if self._ticker is None and not self._closed.is_set():
            self._ticker = threading.Thread(target=self._tick, name="forkd-progress", daemon=True)
            self._ticker.start()

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self._done += nbytes
            now = time.monotonic()
            if self._desc is not None and now - self._last >= self.interval:
                self._last = now
                self._line("at")

    def busy(self, description: str) -> None:
        self.task(description, 0, busy=True)

    def log(self, message: str) -> None:
        with self._lock:
            print(message, file=self.stream, flush=True)

    def close(self, *, finished: bool = True, stopped: str = INTERRUPTED) -> None:
        self._closed.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._finish(finished, stopped)


class RichProgress(Progress):
    """Bars with bytes, rate and ETA (rich, IEC units), for terminals."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, ProgressColumn, TimeRemainingColumn
        from rich.progress import Progress as Bars
        from rich.text import Text

        class IECSpeedColumn(ProgressColumn):
            def render(self, task: Task) -> Text:
                speed = task.finished_speed or task.speed
                return Text("?" if speed is None else f"{human_size(speed)}/s", style="progress.data.speed")

        self._bars = Bars(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(binary_units=True),
            IECSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(file=stream),
            transient=False,
        )
        self._bars.start()
        self._task: TaskID | None = None

    def task(self, description: str, total: int) -> None:
        if self._task is not None:
            self._bars.update(self._task, completed=self._bars.tasks[-1].total)
        self._task = self._bars.add_task(description, total=max(total, 1))

    def advance(self, nbytes: int) -> None:
        if self._task is not None:
            self._bars.advance(self._task, nbytes)

    def log(self, message: str) -> None:
        self._bars.console.print(message, highlight=False, markup=False)

    def close(self, *, finished: bool = True, stopped: str = INTERRUPTED) -> None:
        if self._task is not None:
            if finished:
                self._bars.update(self._task, completed=self._bars.tasks[-1].total)
            else:
                self._bars.stop_task(self._task)
        self._bars.stop()


def make_progress(*, quiet: bool = False, stream: TextIO = sys.stderr) -> Progress:
    if quiet:
        return NullProgress()
    if stream.isatty():
        return RichProgress(stream)
    return LineProgress(stream)
