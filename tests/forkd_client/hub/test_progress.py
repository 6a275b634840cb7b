"""Piped progress (CI logs): a line every interval while a task runs, even when no byte moves."""

from __future__ import annotations

import io
import time

from forkd_client.hub.progress import FAILED, REFUSED, LineProgress


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_lines_keep_coming_while_nothing_advances():
    out = io.StringIO()
    progress = LineProgress(out, interval=0.1)
    progress.task("push base", 10 << 20)
    progress.advance(1 << 20)
    assert _wait_for(lambda: out.getvalue().count("push base: at 1.0 MiB of 10.0 MiB") >= 3), out.getvalue()
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("push base: done, 1.0 MiB of 10.0 MiB")
    after = out.getvalue()
    time.sleep(0.3)
    assert out.getvalue() == after  # closed: the ticker stopped


def test_no_line_between_tasks_and_an_interrupt_says_where_it_stopped():
    out = io.StringIO()
    progress = LineProgress(out, interval=0.1)
    progress.task("push a", 100)
    progress.advance(100)
    progress.task("push b", 100)  # ends "push a"
    progress.advance(40)
    progress.close(finished=False)
    lines = [line for line in out.getvalue().splitlines() if ": at " not in line]
    assert lines[0].startswith("push a: done, 100 B of 100 B") and lines[-1].startswith("push b: interrupted at 40 B")


def test_a_step_of_unknown_length_says_it_is_still_working():
    """Computing a big layer (hashing, compressing) moves no bytes yet: the log still hears from it."""
    out = io.StringIO()
    progress = LineProgress(out, interval=0.1)
    progress.busy("base: computing layer")
    assert _wait_for(lambda: out.getvalue().count("base: computing layer: still working after") >= 2), out.getvalue()
    progress.task("push base", 100)
    progress.close()
    lines = out.getvalue().splitlines()
    assert any(line.startswith("base: computing layer: done in ") for line in lines)
    assert lines[-1].startswith("push base: done, 0 B of 100 B")


def test_a_refusal_or_a_failure_is_not_called_an_interruption():
    """Issue 30 item 9: an immutable tag or a signature policy refused the push once every byte was sent."""
    out = io.StringIO()
    progress = LineProgress(out, interval=3600)
    progress.task("push a", 100)
    progress.advance(100)
    progress.close(finished=False, stopped=REFUSED)
    assert out.getvalue().startswith("push a: refused by the hub after 100 B of 100 B"), out.getvalue()
    busy = io.StringIO()
    progress = LineProgress(busy, interval=3600)
    progress.busy("base: computing layer")
    progress.close(finished=False, stopped=FAILED)
    assert busy.getvalue().startswith("base: computing layer: stopped after "), busy.getvalue()
    assert "interrupted" not in out.getvalue() + busy.getvalue()
