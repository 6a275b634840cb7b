"""Where a test run's CPU goes, per test file: a pytest plugin, off unless asked for (docs/testing.md).

    python -m pytest -m unit -n 2 -q -p tests.services.cpuprofile

Each test process (each xdist worker) records, for every test, the CPU its process spent from the test's setup to
its teardown (``time.process_time``: every thread of the process, so the in-process hub's event loop too) and how
many Litestar apps (in-process hubs) it built; it writes them to ``$FORKD_CPU_PROFILE_DIR`` (a new temporary
directory when unset) as ``cpu-<worker>.json`` (``{nodeid: [cpu_seconds, apps]}``), and the run ends with the
files that cost most. Session fixtures count in the first test that asks for them; collection in no test.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar

_DIR_VARIABLE = "FORKD_CPU_PROFILE_DIR"
_records: dict[str, tuple[float, int]] = {}
_apps = [0]


def _directory() -> Path:
    if _DIR_VARIABLE not in os.environ:  # set once by the first process, inherited by xdist's workers
        os.environ[_DIR_VARIABLE] = tempfile.mkdtemp(prefix="forkd-cpu-")
    directory = Path(os.environ[_DIR_VARIABLE])
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def pytest_configure(config: pytest.Config) -> None:
    _directory()
    init = Litestar.__init__

    def counted(self: Litestar, *args: Any, **kwargs: Any) -> None:
        _apps[0] += 1
        init(self, *args, **kwargs)

    Litestar.__init__ = counted  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu, apps = time.process_time(), _apps[0]
    yield
    _records[item.nodeid] = (time.process_time() - cpu, _apps[0] - apps)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _records:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (_directory() / f"cpu-{worker}.json").write_text(json.dumps(_records))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0])
    for path in _directory().glob("cpu-*.json"):
        for nodeid, (cpu, apps) in json.loads(path.read_text()).items():
            entry = per_file[nodeid.split("::")[0]]
            entry[0] += cpu
            entry[1] += apps
            entry[2] += 1
    total = sum(entry[0] for entry in per_file.values())
    hubs = sum(int(entry[1]) for entry in per_file.values())
    terminalreporter.section(f"CPU per test file: {total:.1f} s in tests, {hubs} apps built ({_directory()})")
    for name, (cpu, apps, tests) in sorted(per_file.items(), key=lambda kv: -kv[1][0])[:25]:
        terminalreporter.write_line(f"{cpu:7.1f} s {int(apps):4d} apps {int(tests):4d} tests  {name}")
