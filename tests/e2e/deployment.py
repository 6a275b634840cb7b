"""A whole deployment as docs/deployment.md provisions it, every part a real process the test owns.

PostgreSQL (its own cluster, a ``hub`` role owning a ``forkd_hub`` database, as the docs' SQL makes them),
SeaweedFS (its own server, the session bucket), ``forkd-hub migrate``, two ``forkd-hub serve`` replicas and
HAProxy with TLS in front (deploy/haproxy.cfg, tests/services/haproxy.py). Faults are injected by stopping
and starting those processes: :meth:`Deployment.kill` / :meth:`restart` a replica, ``postgres.halt()`` /
``resume()``, ``seaweedfs.halt()`` / ``resume()``. Clients (:meth:`Deployment.user`) reach the hub only
through the load balancer, over https, trusting its certificate through ``SSL_CERT_FILE``.

Errors: the services' own (``PostgresUnavailable``, ``SeaweedUnavailable``, ``LoadBalancerUnavailable``,
``NotReady``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.hubproc import HubProcess, forkd_hub
from tests.e2e.test_push_pull_cli import User
from tests.services.haproxy import LoadBalancer
from tests.services.ports import free_port
from tests.services.postgres import PostgresCluster
from tests.services.seaweedfs import SeaweedFS

__all__ = ["Deployment", "Endpoint"]

#: docs/deployment.md, "PostgreSQL": the role and the database the hub uses (PostgreSQL 15: it owns it).
PROVISION_SQL = ("CREATE ROLE hub LOGIN PASSWORD 'secret'", "CREATE DATABASE forkd_hub OWNER hub")


class Endpoint:
    """What :class:`~tests.e2e.test_push_pull_cli.User` needs of a hub: its URL."""

    def __init__(self, url: str) -> None:
        self.url = url


class Deployment:
    """PostgreSQL, SeaweedFS, two hub replicas and HAProxy; ``url`` is the load balancer's."""

    def __init__(
        self, root: Path, *, weed: dict[str, Any] | None = None, replica_env: dict[str, str] | None = None
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.postgres = PostgresCluster()
        self.seaweedfs = SeaweedFS(**(weed or {}))
        self.ports = [free_port(), free_port()]
        self.lb = LoadBalancer(root / "lb", [f"127.0.0.1:{port}" for port in self.ports])
        self.url = self.lb.url
        self.replicas: list[HubProcess | None] = [None, None]
        self.storage_prefix = ""
        self._replica_env = replica_env or {}
        self.env: dict[str, str] = {}

    def start(self, before_migrate: Callable[[Deployment], None] | None = None) -> Deployment:
        """Provision and start everything; ``before_migrate`` runs once PostgreSQL and SeaweedFS are up and the
        hub's settings are known (a restore fills them there)."""
        self.postgres.start()
        self.postgres.execute(*PROVISION_SQL)
        self.seaweedfs.start()
        self.storage_prefix = f"hub-{self.root.name}"[:40]
        self.env = {
            "FORKD_HUB_DATABASE_URL": f"postgresql+asyncpg://hub:secret@127.0.0.1:{self.postgres.port}/forkd_hub",
            "FORKD_HUB_STORAGE": self.seaweedfs.storage_spec(prefix=self.storage_prefix),
            **self.seaweedfs.env,
            **self._replica_env,
        }
        if before_migrate is not None:
            before_migrate(self)
        migrated = self.cli("migrate")
        assert migrated.returncode == 0, migrated.stderr
        for index in range(2):
            self.start_replica(index)
        self.lb.start()
        return self

    # -- processes ------------------------------------------------------------------------------

    def replica_env(self, pythonpath: str | None = None) -> dict[str, str]:
        env = {**self.env, "FORKD_HUB_PUBLIC_URL": self.url, "FORKD_HUB_FORWARDED_ALLOW_IPS": "127.0.0.1"}
        if pythonpath is not None:  # another release of the code (rolling upgrades)
            env["PYTHONPATH"] = pythonpath
        return env

    def start_replica(self, index: int, *, pythonpath: str | None = None) -> HubProcess:
        """Start replica ``index`` on its port (its data directory and log kept across restarts)."""
        hub = HubProcess(
            self.root / f"replica{index}",
            self.root / f"replica{index}.log",
            self.replica_env(pythonpath),
            port=self.ports[index],
        )
        self.replicas[index] = hub
        return hub

    def replica(self, index: int) -> HubProcess:
        hub = self.replicas[index]
        assert hub is not None, f"replica {index} is not running"
        return hub

    def kill(self, index: int) -> None:
        """SIGKILL replica ``index`` (a crash)."""
        self.replica(index).kill()
        self.replicas[index] = None

    def stop_replica(self, index: int) -> int:
        """SIGTERM replica ``index`` (graceful: in-flight requests finish); its exit status."""
        code = self.replica(index).stop()
        self.replicas[index] = None
        return code

    def restart(self, index: int, *, pythonpath: str | None = None) -> HubProcess:
        assert self.stop_replica(index) == 0
        return self.start_replica(index, pythonpath=pythonpath)

    def stop(self) -> None:
        self.lb.stop()
        for index, hub in enumerate(self.replicas):
            if hub is not None:
                self.stop_replica(index)
        self.seaweedfs.stop()
        self.postgres.stop()

    # -- clients --------------------------------------------------------------------------------

    @property
    def libpq_url(self) -> str:
        """The database for PostgreSQL's own tools (pg_dump, pg_restore, psql)."""
        return f"postgresql://hub:secret@127.0.0.1:{self.postgres.port}/forkd_hub"

    def rclone_env(self, remote: str) -> dict[str, str]:
        """An rclone remote named ``remote`` for this deployment's object store (docs/operations.md)."""
        name = remote.upper()
        return {
            f"RCLONE_CONFIG_{name}_TYPE": "s3",
            f"RCLONE_CONFIG_{name}_PROVIDER": "Other",
            f"RCLONE_CONFIG_{name}_ENDPOINT": self.seaweedfs.endpoint,
            f"RCLONE_CONFIG_{name}_ACCESS_KEY_ID": self.seaweedfs.env["AWS_ACCESS_KEY_ID"],
            f"RCLONE_CONFIG_{name}_SECRET_ACCESS_KEY": self.seaweedfs.env["AWS_SECRET_ACCESS_KEY"],
            f"RCLONE_CONFIG_{name}_REGION": "us-east-1",
        }

    @property
    def objects(self) -> str:
        """``bucket/prefix`` of the hub's objects."""
        return f"{self.seaweedfs.bucket}/{self.storage_prefix}"

    def cli(self, *args: str, pythonpath: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        """``forkd-hub ARGS`` on an operator's host: the deployment's settings, no data directory of its own."""
        env = {**os.environ, **self.env, "FORKD_HUB_DATA_DIR": str(self.root / "operator-has-no-data-dir")}
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        return subprocess.run(forkd_hub(*args), env=env, capture_output=True, text=True, timeout=timeout)

    def token(self, name: str, *scopes: str) -> str:
        args = ["token", "create", name]
        for scope in scopes:
            args += ["--scope", scope]
        done = self.cli(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def user(self, name: str, token: str, **env: str) -> User:
        """A machine with its own ``forkd`` store, talking to the load balancer with ``token``."""
        return User(self.root / "users" / name, Endpoint(self.url), FORKD_TOKEN=token, **self.lb.env, **env)  # type: ignore[arg-type]
