"""A throwaway PostgreSQL cluster for tests: ``initdb`` + ``pg_ctl`` in a temp dir, on 127.0.0.1.

Debian's ``postgresql`` package provides the binaries (``/usr/lib/postgresql/<major>/bin``;
``scripts/install-system-deps.sh`` installs it). ``initdb`` refuses to run as root, so as root the
cluster runs as the ``postgres`` system user (``runuser``). Durability is switched off
(``fsync=off``): the data dies with the test session anyway.

``template`` is a database migrated to this code's schema head once; :meth:`create_database`
copies it (``CREATE DATABASE … TEMPLATE``), so each hub in a test gets a fresh, current database
in a few tens of milliseconds.

Errors: :class:`PostgresUnavailable` when the binaries are missing or the cluster cannot start
(the message carries the server log's tail).
"""

from __future__ import annotations

import asyncio
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.services.ports import free_port

__all__ = ["PostgresCluster", "PostgresUnavailable", "find_bin_dir"]

USER = "forkd"
TEMPLATE = "forkd_template"


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries, or the throwaway cluster failed to start."""


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` holding ``initdb`` and ``pg_ctl``, if any."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


class PostgresCluster:
    """One ``postgres`` server process; :meth:`start`, :meth:`create_database`, :meth:`stop`."""

    def __init__(self) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise PostgresUnavailable("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="forkd-pg-"))
        self.port = free_port()
        self._runas: list[str] = []
        self._counter = itertools.count()
        if os.geteuid() == 0:
            self._runas = ["runuser", "-u", "postgres", "--"]
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://{USER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        # cwd: the postgres user must be able to enter it (a test may have chdir'd somewhere private).
        return subprocess.run([*self._runas, *argv], capture_output=True, text=True, timeout=120, check=False,
                              cwd=self.root)

    def start(self) -> None:
        data = self.root / "data"
        done = self._run(str(self.bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust",
                         "-E", "UTF8", "--locale=C", "--no-sync")
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {done.stderr.strip()[-2000:]}")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        done = self._run(str(self.bin_dir / "pg_ctl"), "-D", str(data), "-l", str(self.root / "server.log"),
                         "-o", options, "-w", "-t", "60", "start")
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl start failed: {done.stderr.strip()} {self.log_tail()}")
        asyncio.run(self._make_template())

    def log_tail(self) -> str:
        try:
            return (self.root / "server.log").read_text()[-2000:]
        except OSError:
            return ""

    async def _execute(self, *statements: str, database: str = "postgres") -> None:
        import asyncpg

        conn = await asyncpg.connect(host="127.0.0.1", port=self.port, user=USER, database=database)
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    async def _make_template(self) -> None:
        from hub_server.db.engine import make_engine
        from hub_server.db.schema import upgrade

        await self._execute(f"CREATE DATABASE {TEMPLATE}")
        engine = make_engine(self.url(TEMPLATE))
        try:
            await upgrade(engine)
        finally:
            await engine.dispose()

    def create_database(self, *, empty: bool = False) -> str:
        """A new database (at the schema head, or ``empty``); returns its SQLAlchemy URL."""
        name = f"t{next(self._counter)}_{os.getpid()}"
        template = "template0" if empty else TEMPLATE
        asyncio.run(self._execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY"))
        return self.url(name)

    def stop(self) -> None:
        data = self.root / "data"
        if data.exists():
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
