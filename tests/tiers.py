"""The test tiers (docs/testing.md): every collected test gets exactly one of the markers ``unit``,
``integration`` or ``e2e``, assigned here from where it lives and what it uses, so no test file has to say it.

- ``e2e``: real processes of ours or others (``forkd-hub serve``, the ``forkd`` CLI, QEMU, a browser,
  skopeo): everything under tests/e2e/, and every test marked ``slow`` or ``qemu`` or using a fixture of
  :data:`E2E_FIXTURES`.
- ``integration``: real services and system facilities, in-process otherwise (the session's PostgreSQL
  cluster, the SeaweedFS S3 server, loop-mounted filesystems, FUSE, helper programs): a test using a
  fixture of :data:`INTEGRATION_FIXTURES`, or parametrized onto one of :data:`INTEGRATION_PARAMS` (the
  fixtures that ask for ``postgres`` / ``seaweedfs`` by ``request.getfixturevalue``), or listed in
  :data:`INTEGRATION_FILES`.
- ``unit``: the rest, in-process, and the guard below keeps it so: a unit test that starts a child process
  (``subprocess``, ``os.fork``, ``os.posix_spawn``, ``os.system``, multiprocessing, asyncio subprocesses)
  fails, naming the command, so a test that needs one is moved to a tier that may (a ``@pytest.mark.e2e``
  or ``@pytest.mark.integration`` on the test, or its file in :data:`INTEGRATION_FILES` /
  :data:`E2E_FILES`).

A tier marker written on a test or its module wins over all of these rules.
"""

from __future__ import annotations

import _posixsubprocess  # type: ignore[import-not-found]  # what subprocess and multiprocessing fork with
import os
import subprocess
import sys
from collections.abc import Callable, Generator
from typing import Any

import pytest

__all__ = ["TIERS", "ProcessStartedInUnitTest", "tier_of"]

TIERS = ("unit", "integration", "e2e")

#: Fixtures that start real processes of ours or others.
E2E_FIXTURES = frozenset({"guest", "oci_hub"})

#: Fixtures that start real services or mount filesystems.
INTEGRATION_FIXTURES = frozenset({"postgres", "seaweedfs", "xfs_dir"})

#: Parameter values of fixtures that then ask for a service with ``request.getfixturevalue``
#: (``new_database``, ``stored_hub``, ``empty_database``, ``database_url`` ...).
INTEGRATION_PARAMS = frozenset({"postgresql", "s3"})

#: Files whose every test starts a helper process or mounts a filesystem, with why (path -> reason).
INTEGRATION_FILES: dict[str, str] = {
    "tests/forkd_client/lazy/test_session.py": "lazy sessions serve a FUSE file (/dev/fuse, as root)",
    "tests/forkd_client/lazy/test_session_rootfs.py": "lazy sessions serve FUSE files (/dev/fuse, as root)",
    "tests/forkd_client/lazy/test_early_mount.py": "reads through a FUSE mount",
    "tests/forkd_client/lazy/test_fusefs.py": "mounts the FUSE file system it tests",
    "tests/vmm/test_process.py": "the module under test starts and reaps processes",
    "tests/forkd_client/images/test_apply_umoci.py": "compares with what umoci extracts",
}

#: Files whose every test runs our programs as real processes, with why (path -> reason).
E2E_FILES: dict[str, str] = {
    "tests/forkd_client/test_cli_imports.py": "what `forkd` imports, measured in a fresh interpreter",
    "tests/clikit/test_quickexit.py": "how a real interpreter exits",
}

PATH_TIERS = (("tests/e2e/", "e2e"),)


def tier_of(item: pytest.Item) -> str:
    """The tier of one collected test (the rules of this module's docstring, first match wins)."""
    written = [m.name for m in item.iter_markers() if m.name in TIERS]
    if written:
        return written[0]  # the closest one: a test's own marker over its module's
    path = item.nodeid.split("::", 1)[0]
    for prefix, tier in PATH_TIERS:
        if path.startswith(prefix):
            return tier
    fixtures = set(getattr(item, "fixturenames", ()))
    if (
        path in E2E_FILES
        or fixtures & E2E_FIXTURES
        or item.get_closest_marker("slow")
        or item.get_closest_marker("qemu")
    ):
        return "e2e"
    params = getattr(getattr(item, "callspec", None), "params", {})
    if (
        path in INTEGRATION_FILES
        or fixtures & INTEGRATION_FIXTURES
        or any(isinstance(v, str) and v in INTEGRATION_PARAMS for v in params.values())
    ):
        return "integration"
    return "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        if not item.get_closest_marker(tier):
            item.add_marker(tier)
        item.stash[_TIER] = tier


_TIER = pytest.StashKey[str]()


class ProcessStartedInUnitTest(RuntimeError):
    """A unit-tier test started a child process (the message names it)."""


def _argv(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    for value in (*args, *kwargs.values()):
        if isinstance(value, list | tuple) and value and all(isinstance(v, bytes | str) for v in value):
            return " ".join(v.decode(errors="replace") if isinstance(v, bytes) else v for v in value)[:300]
    return "?"


#: Where a process may start from even in a unit test, and why (a path suffix of the calling module).
ALLOWED_CALLERS = {
    # ctypes.util.find_library asks ldconfig where a C library is: a lookup a module does once when it is
    # first imported (hub_server/registry/sha256state.py, mfusepy), not a process a test exercises
    "/ctypes/util.py": "find_library",
}


def _allowed_caller() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.endswith(tuple(ALLOWED_CALLERS)):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _ProcessGuard:
    """While active, every way Python starts a child process raises :class:`ProcessStartedInUnitTest`,
    and the attempt is remembered (code under test may swallow the exception: the test still fails)."""

    SPAWNERS = (
        (_posixsubprocess, "fork_exec"),
        (subprocess, "_fork_exec"),  # bound at import: `from _posixsubprocess import fork_exec as _fork_exec`
        (os, "fork"),
        (os, "forkpty"),
        (os, "posix_spawn"),
        (os, "posix_spawnp"),
        (os, "system"),
    )

    def __init__(self) -> None:
        self.started: list[str] = []
        self._saved: list[tuple[Any, str, Callable[..., Any]]] = []

    def __enter__(self) -> _ProcessGuard:
        for module, name in self.SPAWNERS:
            original = getattr(module, name, None)
            if original is not None:
                self._saved.append((module, name, original))
                setattr(module, name, self._refuse(name, original))
        return self

    def __exit__(self, *exc: object) -> None:
        for module, name, original in self._saved:
            setattr(module, name, original)
        self._saved.clear()

    def _refuse(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            if _allowed_caller():
                return original(*args, **kwargs)
            what = f"{name}({_argv(args, kwargs)})"
            self.started.append(what)
            raise ProcessStartedInUnitTest(f"a unit-tier test may not start a process: {what}")

        return refuse


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _guarded(item, "call"))


#: The client's retry window (``FORKD_RETRY_FOR``) while a unit test runs, unless the environment sets one:
#: seconds, against the default 60. A unit test that cuts a connection on purpose, with a client left at the
#: default, slept through a minute of retries (eight such tests cost 55-112 s each); at 5 s a hub answering
#: 503 is still retried three times, and a busy upload session still restarts the window.
UNIT_RETRY_WINDOW = "5"


def _guarded(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    """Run one phase of a unit-tier test with the process guard on and the short retry window. Teardown is
    not guarded: the last test of a run also tears down the session's services, whichever tier it is in."""
    if item.stash.get(_TIER, None) != "unit":
        return (yield)
    short_window = "FORKD_RETRY_FOR" not in os.environ
    if short_window:
        os.environ["FORKD_RETRY_FOR"] = UNIT_RETRY_WINDOW
    try:
        return (yield from _process_guarded(item, phase))
    finally:
        if short_window and os.environ.get("FORKD_RETRY_FOR") == UNIT_RETRY_WINDOW:
            del os.environ["FORKD_RETRY_FOR"]


def _process_guarded(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    with _ProcessGuard() as guard:
        try:
            result = yield
        except BaseException as exc:
            if guard.started:
                raise _refused(item, phase, guard) from exc
            raise
    if guard.started:
        raise _refused(item, phase, guard)
    return result


def _refused(item: pytest.Item, phase: str, guard: _ProcessGuard) -> ProcessStartedInUnitTest:
    return ProcessStartedInUnitTest(
        f"{item.nodeid} is in the unit tier but started a process during {phase}: {'; '.join(guard.started)}. "
        "Mark it @pytest.mark.integration (a service, a mount, a helper program) or @pytest.mark.e2e (our "
        "programs as processes, QEMU, a browser), or list its file in tests/tiers.py"
    )
