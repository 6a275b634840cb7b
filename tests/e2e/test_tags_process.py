"""Immutable tags and retention on a real ``forkd-hub serve`` process with real ``forkd`` CLI processes:
two concurrent pushes of one immutable tag have exactly one winner, and retention run by ``forkd-hub gc``
never breaks a kept chain (every kept tag pulls back byte-exact; a dry run removes nothing)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess, forkd_hub
from tests.e2e.test_push_pull_cli import MiB, User

pytestmark = pytest.mark.slow


def _hub_cli(hub: HubProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(forkd_hub(*args), env=hub.env, capture_output=True, text=True, timeout=120, check=False)


def _lone_source(root: Path) -> Path:
    src = root / "lone"
    src.mkdir(parents=True)
    with open(src / "memory.bin", "wb") as f:
        f.truncate(4 * MiB)
        f.write(os.urandom(MiB))
    (src / "vmstate").write_bytes(b"lone" * 300)
    return src


def _small_chain(root: Path) -> list[Path]:
    """Base + 2 links of an 8 MiB sparse memory image; each link rewrites 256 KiB."""
    sources: list[Path] = []
    data = bytearray(8 * MiB)
    data[MiB : 2 * MiB] = os.urandom(MiB)
    for i in range(3):
        if i:
            data[(2 + i) * MiB : (2 + i) * MiB + MiB // 4] = os.urandom(MiB // 4)
        src = root / f"src{i}"
        src.mkdir(parents=True)
        (src / "memory.bin").write_bytes(bytes(data))
        (src / "vmstate").write_bytes(f"vmstate-{i}".encode() * 300)
        sources.append(src)
    return sources


def test_two_concurrent_pushes_of_an_immutable_tag_have_exactly_one_winner(tmp_path):
    hub = HubProcess(tmp_path / "hub", tmp_path / "hub.log", env={"FORKD_HUB_IMMUTABLE_TAGS": "true"})
    try:
        token = hub.token("ci", "push:acme/*")
        users = []
        for name in ("alice", "bob"):
            user = User(tmp_path / name, hub, FORKD_TOKEN=token)
            user.run("import", str(_lone_source(tmp_path / f"{name}-src")), "env")
            users.append(user)
        procs = [user.start("push", "env", "acme/py:v1") for user in users]
        outcomes = []
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            outcomes.append((proc.returncode, out.decode(), err.decode()))
        codes = sorted(code for code, _, _ in outcomes)
        assert codes == [0, 4], outcomes  # the loser exits with the conflict class (docs/cli.md)
        winner = next(i for i, (code, _, _) in enumerate(outcomes) if code == 0)
        _, _, err = outcomes[1 - winner]
        assert "acme/py:v1 is immutable and already points at sha256:" in err, err
        assert "Traceback" not in err

        loser = users[1 - winner]
        forced = loser.run("push", "env", "acme/py:v1", "--force", check=False)  # --force does not lift it
        assert forced.returncode == 4 and "is immutable" in forced.stderr
        again = users[winner].run("push", "env", "acme/py:v1")  # the digest it names: fine
        assert again.returncode == 0
        loser.run("push", "env", "acme/py:latest")  # latest is exempt: it moves
        users[winner].run("push", "env", "acme/py:latest")
        response = httpx.put(
            f"{hub.url}/v2/acme/py/manifests/v1",
            content=b"{}",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        )
        assert response.status_code == 400  # a bad manifest is still refused for what it is
    finally:
        assert hub.stop() == 0


def test_retention_by_gc_keeps_every_kept_chain_pullable(tmp_path):
    hub = HubProcess(tmp_path / "hub", tmp_path / "hub.log")
    try:
        alice = User(tmp_path / "alice", hub, FORKD_TOKEN=hub.token("ci", "push:acme/*"))
        reader = hub.token("reader", "pull:acme/*")
        sources = _small_chain(tmp_path / "src")
        alice.run("import", str(_lone_source(tmp_path / "l")), "lone")
        for i, (src, tag) in enumerate(zip(sources, ["base", "numpy", "pandas"], strict=True)):
            alice.run("import", str(src), tag, *(["--parent", ["base", "numpy"][i - 1]] if i else []))
        alice.run("push", "lone", "acme/ci:nightly-0")
        for i, tag in enumerate(["base", "numpy", "pandas"], start=1):
            alice.run("push", tag, f"acme/ci:nightly-{i}")
        alice.run("push", "base", "acme/ci:release")
        policy = _hub_cli(
            hub, "repo", "policy", "acme/ci", "--keep-last", "1", "--retention-pattern", "nightly-*", "--json"
        )
        assert policy.returncode == 0, policy.stderr

        dry = _hub_cli(hub, "gc", "--dry-run", "--grace", "0s", "--json")
        assert dry.returncode == 0, dry.stderr
        report = json.loads(dry.stdout)
        assert [e["tag"] for e in report["retention"]] == ["nightly-0", "nightly-1", "nightly-2"]
        assert len(report["retention_manifests"]) == 1  # only the lone layer: the others are nightly-3's chain
        tags = httpx.get(f"{hub.url}/v2/acme/ci/tags/list", headers={"Authorization": f"Bearer {reader}"})
        assert sorted(tags.json()["tags"]) == ["nightly-0", "nightly-1", "nightly-2", "nightly-3", "release"]

        done = _hub_cli(hub, "gc", "--grace", "0s")
        assert done.returncode == 0, done.stderr
        assert "retention removed 3 tag(s):" in done.stdout and "deleted 1 manifest(s)" in done.stdout

        bob = User(tmp_path / "bob", hub, FORKD_TOKEN=reader)
        for tag, expect in (("nightly-3", sources), ("release", sources[:1])):
            pulled = bob.json("pull", f"acme/ci:{tag}", "--as", tag)
            assert pulled["tag"] == tag
            chain = bob.json("inspect", tag)
            for src, local in zip(expect, [*chain["ancestors"], tag], strict=True):
                for role in ("memory.bin", "vmstate"):
                    assert (bob.home / "snapshots" / local / role).read_bytes() == (src / role).read_bytes()
        gone = bob.run("pull", "acme/ci:nightly-1", "--as", "old", check=False)
        assert gone.returncode == 1 and "nightly-1" in gone.stderr  # not found: the generic class
    finally:
        assert hub.stop() == 0
