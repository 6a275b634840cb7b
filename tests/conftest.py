"""Session fixtures that start real services once per test run: PostgreSQL and SeaweedFS (S3)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services.postgres import PostgresCluster, find_bin_dir


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL cluster; ``postgres.create_database()`` gives a fresh database URL."""
    if find_bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (scripts/install-system-deps.sh installs it)")
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
