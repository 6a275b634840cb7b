"""The traceback scan of tests/conftest.py: a passing test whose captured output holds a traceback fails."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

#: The inner run reads no pyproject.toml: switch off what ours does (pytest-benchmark asks git for the
#: project's name when it starts, a process this unit test may not start: tests/tiers.py).
QUIET_PLUGINS = ("-p", "no:benchmark", "-p", "no:faker", "-p", "no:xdist")


@pytest.mark.traceback_expected  # the inner run's output, captured here, holds the two it provokes
def test_a_logged_traceback_fails_a_passing_test(pytester):
    pytester.makeconftest("from tests.conftest import pytest_runtest_makereport  # noqa: F401\n")
    pytester.makepyfile(
        """
        import logging
        import pytest

        pytestmark = pytest.mark.traceback_scanned

        def test_logs_one():
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                logging.getLogger("hub").exception("unexpected")

        def test_prints_one():
            print("Traceback (most recent call last):")

        def test_quiet():
            print("all fine")

        @pytest.mark.traceback_expected
        def test_on_purpose():
            print("Traceback (most recent call last):")
        """
    )
    result = pytester.runpytest_inprocess(
        *QUIET_PLUGINS,
        "-p",
        "no:cacheprovider",
        "-o",
        "markers=traceback_expected: on purpose\ntraceback_scanned: scanned",
    )
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*holds a Python traceback*"])
