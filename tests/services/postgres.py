"""A throwaway PostgreSQL cluster for tests: ``initdb`` + ``pg_ctl`` in a temp dir, on 127.0.0.1.

Debian's ``postgresql`` package provides the binaries (``/usr/lib/postgresql/<major>/bin``;
``scripts/install-system-deps.sh`` installs it). ``initdb`` refuses to run as root, so as root the
cluster runs as the ``postgres`` system user (``runuser``). Durability is switched off
(``fsync=off``): the data dies with the test session anyway.

``template`` is a database migrated to this code's schema head once; :meth:`create_database`
copies it (``CREATE DATABASE … TEMPLATE``), so each hub in a test gets a fresh, current database
in a few tens of milliseconds.

``pg_ctl`` detaches the server, so it cannot die with the test process (and a parent-death signal
would not survive ``runuser``'s change of user). Instead each cluster directory records its owner
(pid and start time, :data:`OWNER_FILE`, written before ``initdb``), and :func:`reap_orphans`,
run whenever a :class:`PostgresCluster` is made, stops the server of any cluster whose owner is gone
(a test run killed before its teardown) and deletes its directory.

:meth:`halt` stops the server the way a crash or an operator would (``pg_ctl stop -m immediate``: every
connection dropped at once) and :meth:`resume` starts it again on the same port and data: the faults the
operations tests inject (tests/e2e/operations/).

Errors: :class:`PostgresUnavailable` when the binaries are missing or the cluster cannot start
(the message carries the server log's tail). The wait for it to accept connections is
tests/services/readiness.py's: 120 s scaled by the load, longer while the server works.
"""

from __future__ import annotations

import asyncio
import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.services.ports import free_port
from tests.services.readiness import NotReady, wait_ready

__all__ = ["PostgresCluster", "PostgresUnavailable", "find_bin_dir", "reap_orphans"]

USER = "forkd"
TEMPLATE = "forkd_template"
PREFIX = "forkd-pg-"
OWNER_FILE = "owner"
"""``<pid> <start time in clock ticks since boot>`` of the process that made the cluster."""


def _start_time(pid: int) -> str | None:
    """A process's start time (``/proc/<pid>/stat`` field 22), or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _stop_postmaster(data: Path) -> None:
    """SIGQUIT (immediate shutdown) to the server of ``data``, SIGKILL if it is still there after 10 s."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return  # no server running on it
    if str(data).encode() not in cmdline:
        return  # the pid was reused by something else
    os.kill(pid, signal.SIGQUIT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _start_time(pid) is not None:
        time.sleep(0.05)
    if _start_time(pid) is not None:
        os.kill(pid, signal.SIGKILL)


def reap_orphans(parent: Path | None = None) -> int:
    """Stop and delete every throwaway cluster under ``parent`` (the temp dir) whose owner process
    is gone; returns how many. Directories without an owner record are left alone."""
    reaped = 0
    for root in Path(parent or tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            pid, started = (root / OWNER_FILE).read_text().split()
        except (OSError, ValueError):
            continue
        if _start_time(int(pid)) == started:
            continue
        _stop_postmaster(root / "data")
        shutil.rmtree(root, ignore_errors=True)
        reaped += 1
    return reaped


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
        reap_orphans()
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        (self.root / OWNER_FILE).write_text(f"{os.getpid()} {_start_time(os.getpid())}")
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
        return subprocess.run(
            [*self._runas, *argv], capture_output=True, text=True, timeout=120, check=False, cwd=self.root
        )

    def start(self) -> None:
        data = self.root / "data"
        done = self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {done.stderr.strip()[-2000:]}")
        self._launch()
        asyncio.run(self._make_template())

    def _launch(self) -> None:
        """``pg_ctl start`` on the cluster's data directory, then wait until it accepts connections."""
        data = self.root / "data"
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        done = self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-W",
            "start",
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl start failed: {done.stderr.strip()} {self.log_tail()}")
        try:
            wait_ready(
                self._accepts_connections,
                what=f"PostgreSQL on port {self.port}",
                pids=lambda: [pid] if (pid := self._postmaster_pid()) else [],
                log=self.root / "server.log",
            )
        except NotReady as exc:
            raise PostgresUnavailable(str(exc)) from exc

    def halt(self) -> None:
        """Stop the server at once (connections dropped, as in a crash); the data stays for :meth:`resume`."""
        done = self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        if done.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl stop failed: {done.stderr.strip()} {self.log_tail()}")

    def resume(self) -> None:
        """Start the server again after :meth:`halt` (same port, same data). Raises PostgresUnavailable."""
        self._launch()

    def execute(self, *statements: str, database: str = "postgres") -> None:
        """Run SQL statements as the cluster's superuser (tests: roles, grants)."""
        asyncio.run(self._execute(*statements, database=database))

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.root / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def _accepts_connections(self) -> bool:
        """What ``pg_ctl -w`` waits for: the server wrote "ready" as its status in postmaster.pid."""
        try:
            lines = (self.root / "data" / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        if len(lines) > 7 and lines[7].strip() == "ready":
            return True
        if self._postmaster_pid() is None and "FATAL" in self.log_tail():
            raise PostgresUnavailable(f"PostgreSQL did not start: {self.log_tail()}")
        return False

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
