"""Issue 28: backup and restore as docs/operations.md says, into a fresh stack.

The source deployment holds chains in two repositories (one tag moved, so an unreferenced layer exists too)
while the backup runs: ``forkd-hub gc --hold``, ``pg_dump``, then ``rclone copy`` of every object, then
``forkd-hub gc --release`` — the database first, the objects second, nothing deleted in between, so every object
the dump references is in the copy. The source is then torn down, and a fresh PostgreSQL and SeaweedFS get the
dump (``pg_restore``) and the objects (``rclone copy`` back); ``forkd-hub verify`` is clean there and every tag
pulls byte-identical through the new stack's load balancer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.deployment import Deployment
from tests.e2e.test_push_pull_cli import make_sources

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operations-backup")]


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    full.pop("AWS_CA_BUNDLE", None)  # rclone's S3 backend refuses it (LoadCustomCABundleError; docs/operations.md)
    done = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    return done


@pytest.mark.skipif(shutil.which("rclone") is None, reason="rclone is not installed (scripts/install-system-deps.sh)")
def test_a_backup_restored_into_a_fresh_stack_pulls_byte_identical_and_verifies(tmp_path):
    source = Deployment(tmp_path / "source").start()
    backup = tmp_path / "backup"
    try:
        token = source.token("ci", "push:acme/*")
        alice = source.user("alice", token)
        chain = make_sources(tmp_path / "src")
        for i, (src, tag) in enumerate(zip(chain, ["base", "numpy", "pandas"], strict=True)):
            alice.run("import", str(src), tag, *(["--parent", ["base", "numpy"][i - 1]] if i else []))
        alice.run("push", "pandas", "acme/py:v1")
        alice.run("push", "numpy", "acme/py:v1", "--force")  # v1 moved back: the pandas layer is unreferenced
        alice.run("push", "pandas", "acme/py:pandas")
        alice.run("push", "base", "acme/base:latest")
        tags = {"acme/py:v1": chain[1], "acme/py:pandas": chain[2], "acme/base:latest": chain[0]}

        # the backup, in docs/operations.md's order
        held = source.cli("gc", "--hold", "2h")
        assert held.returncode == 0 and "held until" in held.stdout, held.stderr
        busy = source.cli("gc")
        assert busy.returncode == 1 and "another garbage collection is running (hold:" in busy.stderr
        backup.mkdir()
        _run(["pg_dump", "--format=custom", f"--file={backup / 'hub.dump'}", source.libpq_url])
        _run(
            ["rclone", "copy", "--checksum", f"hub:{source.objects}", str(backup / "objects")], source.rclone_env("hub")
        )
        released = source.cli("gc", "--release")
        assert released.returncode == 0 and "resumes" in released.stdout, released.stderr
    finally:
        source.stop()  # the source stack is gone

    def restore(target: Deployment) -> None:
        _run(["pg_restore", "--no-owner", "--role=hub", f"--dbname={target.libpq_url}", str(backup / "hub.dump")])
        _run(
            ["rclone", "copy", "--checksum", str(backup / "objects"), f"hub:{target.objects}"], target.rclone_env("hub")
        )

    target = Deployment(tmp_path / "target").start(before_migrate=restore)
    try:
        released = target.cli("gc", "--release")  # the dump carries the backup's hold
        assert released.returncode == 0, released.stderr
        verified = target.cli("verify", "--json")
        assert verified.returncode == 0, (verified.stdout[-3000:], verified.stderr)
        audit = target.cli("audit", "--verify")
        assert audit.returncode == 0, audit.stderr
        bob = target.user("bob", target.token("bob", "pull:acme/*"))
        for i, (ref, src) in enumerate(tags.items()):
            bob.run("pull", ref, "--as", f"t{i}")
            for role in ("memory.bin", "vmstate"):
                assert (bob.home / "snapshots" / f"t{i}" / role).read_bytes() == (src / role).read_bytes(), (ref, role)
    finally:
        target.stop()


def test_the_documented_backup_commands_are_the_ones_tested():
    """docs/operations.md shows the commands this module runs (same tools, same options)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    for command in (
        "forkd-hub gc --hold 2h",
        "pg_dump --format=custom",
        "rclone copy --checksum",
        "forkd-hub gc --release",
        "pg_restore --no-owner --role=hub",
        "forkd-hub verify",
    ):
        assert command in text, command
