"""Issue 28 item 6: a rolling upgrade of two replicas across a schema change, with pushes and pulls running.

The "next release" is this tree plus one revision (after this tree's head) written as the rule says (docs/operations.md,
"Rolling upgrades"): expand-only, ``expand = True``. While users push and pull through the load balancer
without pause, the operator runs the next release's ``forkd-hub migrate``, a replica of the current release
restarts (it must start: the schema was declared compatible with it), then each replica is replaced by the
next release in turn. Not one push or pull may fail. A ``contract`` revision instead is refused by the
previous release, with a message saying which code it needs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hub_server.db.schema import head_revision
from tests.e2e.deployment import Deployment
from tests.e2e.hubproc import forkd_hub
from tests.e2e.test_push_pull_cli import MiB

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operations-rolling-upgrade")]

ROOT = Path(__file__).resolve().parents[2]
#: What a hub process imports (forkd_client and vmm are not part of a server release).
SERVER_PACKAGES = ("hub_server", "manifest", "clikit", "web")

EXPAND = '''"""The next release's schema change: expand-only (a nullable column on a table every push writes, a table).

Revision ID: next
Revises: {head}
"""

import sqlalchemy as sa
from alembic import op

revision = "next"
down_revision = "{head}"
branch_labels = None
depends_on = None
expand = {expand}


def upgrade() -> None:
    with op.batch_alter_table("tags") as batch_op:
        batch_op.add_column(sa.Column("note", sa.String(length=200), nullable=True))
    op.create_table("release_notes", sa.Column("id", sa.Integer(), primary_key=True), sa.Column("text", sa.Text()))


def downgrade() -> None:
    op.drop_table("release_notes")
    with op.batch_alter_table("tags") as batch_op:
        batch_op.drop_column("note")
'''


def next_release(root: Path, *, expand: bool) -> str:
    """A copy of this tree's server packages with revision ``next`` added on its head; returns it as a PYTHONPATH."""
    tree = root / ("next-release" if expand else "next-release-contract")
    for package in SERVER_PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    versions = tree / "hub_server" / "db" / "revisions" / "versions"
    (versions / "9999_next_release.py").write_text(EXPAND.format(expand=expand, head=head_revision()))
    return str(tree)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    d = Deployment(tmp_path_factory.mktemp("upgrade")).start()
    yield d
    d.stop()


class Traffic:
    """Users pushing new snapshots and pulling them back, without pause, until :meth:`stop`."""

    def __init__(self, deployment: Deployment, root: Path) -> None:
        token = deployment.token("traffic", "push:acme/*")
        self.pusher = deployment.user("pusher", token)
        self.puller = deployment.user("puller", token)
        self.root = root
        self.pushed: list[tuple[str, bytes]] = []
        self.failures: list[str] = []
        self.pulls = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._push_loop), threading.Thread(target=self._pull_loop)]

    def start(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def _push_loop(self) -> None:
        number = 0
        while not self._stop.is_set():
            source = self.root / f"s{number}"
            source.mkdir(parents=True)
            memory = bytes(MiB) + os.urandom(MiB) + bytes(2 * MiB)
            (source / "memory.bin").write_bytes(memory)
            (source / "vmstate").write_bytes(f"vmstate-{number}".encode() * 300)
            self.pusher.run("import", str(source), f"s{number}")
            done = self.pusher.run("push", f"s{number}", f"acme/traffic:v{number}", check=False)
            if done.returncode != 0:
                self.failures.append(f"push v{number}: exit {done.returncode}: {done.stderr[-1500:]}")
            else:
                self.pushed.append((f"v{number}", memory))
            number += 1

    def _pull_loop(self) -> None:
        while not self._stop.is_set():
            if not self.pushed:
                time.sleep(0.5)
                continue
            tag, memory = self.pushed[-1]
            as_tag = f"pulled-{self.pulls}"
            done = self.puller.run("pull", f"acme/traffic:{tag}", "--as", as_tag, check=False)
            if done.returncode != 0:
                self.failures.append(f"pull {tag}: exit {done.returncode}: {done.stderr[-1500:]}")
            elif (self.puller.home / "snapshots" / as_tag / "memory.bin").read_bytes() != memory:
                self.failures.append(f"pull {tag}: different bytes")
            self.pulls += 1

    def wait_for(self, pushes: int, pulls: int) -> None:
        """Until at least that many pushes and pulls have finished (the phase saw traffic)."""
        target = (len(self.pushed) + len(self.failures) + pushes, self.pulls + pulls)
        deadline = time.monotonic() + 900
        while (len(self.pushed) + len(self.failures), self.pulls) < target:
            assert time.monotonic() < deadline, "traffic stalled"
            assert all(t.is_alive() for t in self._threads), "a traffic thread died"
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=900)


def test_two_replicas_upgrade_one_by_one_across_a_schema_change_while_traffic_runs(deployment, tmp_path):
    release = next_release(tmp_path, expand=True)
    traffic = Traffic(deployment, tmp_path / "traffic").start()
    try:
        traffic.wait_for(pushes=1, pulls=1)
        migrated = deployment.cli("migrate", pythonpath=release)
        assert migrated.returncode == 0 and "applied revision(s) next" in migrated.stdout, migrated.stderr
        traffic.wait_for(pushes=1, pulls=1)  # the current release serves the migrated schema

        old = deployment.restart(0)  # a replica of the current release restarts after the migration
        assert f"newer than this forkd-hub's {head_revision()}" in old.log() and "so this one starts" in old.log()
        traffic.wait_for(pushes=1, pulls=1)

        deployment.restart(1, pythonpath=release)  # replaced by the next release, one at a time
        traffic.wait_for(pushes=1, pulls=1)
        deployment.restart(0, pythonpath=release)
        traffic.wait_for(pushes=2, pulls=2)
    finally:
        traffic.stop()
    assert traffic.failures == []
    assert len(traffic.pushed) >= 7 and traffic.pulls >= 7
    head = deployment.cli("audit", "--verify", pythonpath=release)
    assert head.returncode == 0, head.stderr


def test_the_previous_release_refuses_a_contract_revision_and_says_what_it_needs(deployment, tmp_path):
    release = next_release(tmp_path, expand=False)
    deployment.postgres.execute("CREATE DATABASE contract_test OWNER hub")
    env = {
        **deployment.env,
        "FORKD_HUB_DATABASE_URL": deployment.env["FORKD_HUB_DATABASE_URL"].rsplit("/", 1)[0] + "/contract_test",
        "FORKD_HUB_DATA_DIR": str(tmp_path / "data"),
    }

    def forkd_hub_run(*args: str, pythonpath: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            forkd_hub(*args),
            env={**os.environ, **env, "PYTHONPATH": pythonpath},
            capture_output=True,
            text=True,
            timeout=300,
        )

    migrated = forkd_hub_run("migrate", pythonpath=release)
    assert migrated.returncode == 0, migrated.stderr
    refused = forkd_hub_run("serve", "--port", "0", pythonpath=str(ROOT))
    assert refused.returncode == 1, refused.stderr
    assert "schema is at revision next" in refused.stderr and "needs code from revision next on" in refused.stderr
    assert "Traceback" not in refused.stderr
