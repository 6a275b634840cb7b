"""tests/tiers.py: each test lands in one tier by the rules, and a unit test that starts a process fails,
even when the code under test swallows the refusal."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from tests.tiers import pytest_collection_modifyitems, pytest_runtest_call, pytest_runtest_setup

@pytest.fixture
def postgres():
    return None

@pytest.fixture(params=["sqlite", "postgresql"])
def new_database(request):
    return request.param
"""
MARKERS = "markers=unit: u\nintegration: i\ne2e: e\nslow: s\nqemu: q"
#: The inner runs read no pyproject.toml: no plugin that starts a process when it starts (test_traceback_scan.py).
QUIET = ("-p", "no:benchmark", "-p", "no:faker", "-p", "no:xdist", "-p", "no:cacheprovider", "-o", MARKERS)


@pytest.fixture
def tree(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "tests" / "e2e").mkdir(parents=True)  # no __init__.py: not our own `tests` package
    (pytester.path / "tests" / "test_a.py").write_text(
        """
import subprocess
import pytest

def test_pure():
    assert 1 + 1 == 2

def test_uses_postgres(postgres):
    pass

def test_on_both_databases(new_database):
    pass

@pytest.mark.slow
def test_slow():
    pass

def test_spawns():
    subprocess.run(["true"], check=True)

def test_spawns_and_swallows():
    try:
        subprocess.run(["true"], check=True)
    except Exception:
        pass

@pytest.mark.integration
def test_spawns_and_says_so():
    subprocess.run(["true"], check=True)
"""
    )
    (pytester.path / "tests" / "e2e" / "test_b.py").write_text("def test_real_process():\n    pass\n")
    return pytester


def _selected(tree: pytest.Pytester, tier: str) -> list[str]:
    result = tree.runpytest_inprocess(*QUIET, "-m", tier, "--collect-only", "-q")
    return sorted(line.split("::", 1)[1] for line in result.outlines if "::" in line)


def test_each_test_lands_in_the_tier_its_path_fixtures_and_markers_say(tree: pytest.Pytester) -> None:
    assert _selected(tree, "unit") == [
        "test_on_both_databases[sqlite]",
        "test_pure",
        "test_spawns",
        "test_spawns_and_swallows",
    ]
    assert _selected(tree, "integration") == [
        "test_on_both_databases[postgresql]",
        "test_spawns_and_says_so",
        "test_uses_postgres",
    ]
    assert _selected(tree, "e2e") == ["test_real_process", "test_slow"]


@pytest.mark.integration  # the inner integration test really starts `true`
def test_a_unit_test_that_starts_a_process_fails_naming_it(tree: pytest.Pytester) -> None:
    result = tree.runpytest_inprocess(*QUIET, "-k", "spawns")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_spawns is in the unit tier but started a process during call: *fork_exec(true)*",
            "*test_spawns_and_swallows is in the unit tier but started a process during call*",
        ]
    )
