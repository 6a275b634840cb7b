"""clikit.quickexit: a command's status, output, atexit handlers and files all survive the quick exit;
a live non-daemon thread is still waited for. Each case is a real child interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_child(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = "from clikit.quickexit import run_and_exit\n" + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def test_status_and_buffered_output_survive(tmp_path: Path) -> None:
    done = run_child(
        """
        import sys
        def main():
            sys.stdout.write("out without a newline")
            sys.stderr.write("err line\\n")
            return 3
        run_and_exit(main)
        """,
        tmp_path,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out without a newline", "err line\n")


def test_atexit_handlers_and_logging_still_run(tmp_path: Path) -> None:
    done = run_child(
        """
        import atexit, logging, sys
        from pathlib import Path
        out = Path(sys.argv[1])
        handler = logging.FileHandler(out / "log.txt", delay=False)
        logging.getLogger("t").addHandler(handler)
        atexit.register(lambda: (out / "atexit.txt").write_text("ran"))
        def main():
            logging.getLogger("t").warning("logged at the end")
            return 0
        run_and_exit(main)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "log.txt").read_text() == "logged at the end\n"


def test_files_still_open_are_flushed(tmp_path: Path) -> None:
    """A module-level file (a normal exit flushes it when it clears the modules) and one only a
    reference cycle holds (a normal exit may lose it: the collector finalizes its layers in any order)."""
    done = run_child(
        """
        import sys
        from pathlib import Path
        out = Path(sys.argv[1])
        GLOBAL = open(out / "global.txt", "w")
        import gc
        gc.freeze()  # as a server does after start-up: the collector no longer lists GLOBAL
        class Holder:
            pass
        def main():
            GLOBAL.write("buffered in a module-level file")
            holder = Holder()
            holder.me = holder
            holder.f = open(out / "cycle.txt", "wb")
            holder.f.write(b"buffered in a cycle")
            return 0
        run_and_exit(main)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "global.txt").read_text() == "buffered in a module-level file"
    assert (tmp_path / "cycle.txt").read_bytes() == b"buffered in a cycle"


def test_a_running_non_daemon_thread_is_waited_for(tmp_path: Path) -> None:
    done = run_child(
        """
        import sys, threading, time
        from pathlib import Path
        def late():
            time.sleep(0.5)
            (Path(sys.argv[1]) / "thread.txt").write_text("finished")
        def main():
            threading.Thread(target=late).start()
            return 4
        run_and_exit(main)
        """,
        tmp_path,
    )
    assert done.returncode == 4, done.stderr
    assert (tmp_path / "thread.txt").read_text() == "finished"


def test_an_exception_takes_the_normal_path_with_its_traceback(tmp_path: Path) -> None:
    done = run_child(
        """
        def main():
            raise RuntimeError("a bug")
        run_and_exit(main)
        """,
        tmp_path,
    )
    assert done.returncode == 1
    assert "RuntimeError: a bug" in done.stderr


def test_the_console_scripts_use_it() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    # forkd-hub's loads hub_server.cli with the collector paused (clikit/gcpause.py), then runs its ``run``
    assert scripts == {"forkd": "forkd_client.cli.main:run", "forkd-hub": "hub_server.entry:run"}


def test_forkd_hubs_entry_runs_the_cli_with_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """hub_server.entry.run loads the CLI paused, then runs hub_server.cli.run (the quick exit) with the
    collector as it was: the pause covers the loading only."""
    import gc

    import hub_server.cli
    import hub_server.entry

    seen: list[bool] = []
    monkeypatch.setattr(hub_server.cli, "run", lambda: seen.append(gc.isenabled()))
    hub_server.entry.run()
    assert seen == [gc.isenabled()] == [True]
