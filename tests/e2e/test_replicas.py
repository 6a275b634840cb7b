"""Two ``forkd-hub serve`` replicas on one PostgreSQL and one S3 (SeaweedFS), driven by ``forkd`` processes.

Nothing that matters lives in a replica: links pushed through one pull through the other, a tag
pushed through both at once has one winner (the loser's ``forkd push`` exits 4, a conflict, saying so), and
garbage collection on one replica while a push runs on the other loses nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess, forkd_hub
from tests.e2e.test_push_pull_cli import MiB, User, make_sources

pytestmark = pytest.mark.slow


class Replicas:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.env = env
        self.hubs = [HubProcess(root / f"replica{i}", root / f"replica{i}.log", env=env) for i in range(2)]

    def token(self, name: str, *scopes: str) -> str:
        return self.hubs[0].token(name, *scopes)

    def login(self, user: User, token: str) -> None:
        for hub in self.hubs:
            user.run("login", hub.url, "--token-stdin", input=token + "\n")

    def ref(self, index: int, name: str) -> str:
        return f"{self.hubs[index].url.removeprefix('http://')}/{name}"

    def stop(self) -> None:
        for hub in self.hubs:
            assert hub.stop() == 0


@pytest.fixture
def replicas(tmp_path: Path, postgres, seaweedfs):
    env = {
        "FORKD_HUB_DATABASE_URL": postgres.create_database(empty=True),
        "FORKD_HUB_STORAGE": seaweedfs.storage_spec(),
    }
    full_env = {**os.environ, **env, "FORKD_HUB_DATA_DIR": str(tmp_path / "cli")}
    refused = subprocess.run(
        forkd_hub("serve", "--port", "0"), env=full_env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 1 and "run `forkd-hub migrate` first" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    migrated = subprocess.run(forkd_hub("migrate"), env=full_env, capture_output=True, text=True, timeout=60)
    assert migrated.returncode == 0 and "applied revision(s) 0001" in migrated.stdout, migrated.stderr
    group = Replicas(tmp_path, env)
    yield group
    group.stop()


def _same_files(user: User, tag: str, source: Path) -> None:
    for role in ("memory.bin", "vmstate"):
        assert (user.home / "snapshots" / tag / role).read_bytes() == (source / role).read_bytes(), (tag, role)


def _import(user: User, sources: list[Path], tags: list[str]) -> None:
    for i, (src, tag) in enumerate(zip(sources, tags, strict=True)):
        user.run("import", str(src), tag, *(["--parent", tags[i - 1]] if i else []))


def _both(*commands) -> list[subprocess.CompletedProcess]:
    results: list[subprocess.CompletedProcess | None] = [None, None]

    def run(index: int) -> None:
        results[index] = commands[index]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results  # type: ignore[return-value]


def test_links_pushed_through_each_replica_pull_through_the_other(replicas, tmp_path):
    sources = make_sources(tmp_path / "src")
    token = replicas.token("ci", "push:acme/*")
    alice, dave = User(tmp_path / "alice", replicas.hubs[0]), User(tmp_path / "dave", replicas.hubs[1])
    for user in (alice, dave):  # two machines holding the same chain
        replicas.login(user, token)
        _import(user, sources, ["base", "numpy", "pandas"])
    pushes = _both(
        lambda: alice.run("push", "numpy", replicas.ref(0, "acme/py:numpy"), "--quiet", check=False),
        lambda: dave.run("push", "pandas", replicas.ref(1, "acme/py:pandas"), "--quiet", check=False),
    )
    assert [p.returncode for p in pushes] == [0, 0], [p.stderr for p in pushes]

    bob = User(tmp_path / "bob", replicas.hubs[0])
    replicas.login(bob, replicas.token("bob", "pull:acme/*"))
    bob.run("pull", replicas.ref(0, "acme/py:pandas"), "--as", "pandas")
    bob.run("pull", replicas.ref(1, "acme/py:numpy"), "--as", "numpy2")
    chain = bob.json("inspect", "pandas")
    for src, tag in zip(sources, [*chain["ancestors"], "pandas"], strict=True):
        _same_files(bob, tag, src)
    _same_files(bob, "numpy2", sources[1])


def test_one_tag_pushed_through_both_replicas_at_once_has_one_winner(replicas, tmp_path):
    token = replicas.token("ci", "push:acme/*")
    users = []
    for name in ("alice", "carol"):
        user = User(tmp_path / name, replicas.hubs[0], FORKD_UPLOAD_PART_BYTES=str(MiB))
        replicas.login(user, token)
        _import(user, make_sources(tmp_path / f"src-{name}", data_mib=24)[:1], ["base"])
        users.append(user)
    pushes = _both(
        *(
            lambda i=i: users[i].run("push", "base", replicas.ref(i, "acme/race:v1"), "--json", check=False)
            for i in range(2)
        )
    )
    codes = sorted(p.returncode for p in pushes)
    assert codes == [0, 4], [(p.returncode, p.stderr[-500:]) for p in pushes]
    winner = next(p for p in pushes if p.returncode == 0)
    loser = next(p for p in pushes if p.returncode == 4)
    assert "another push moved it" in loser.stderr and "--force" in loser.stderr
    assert "Traceback" not in loser.stderr and loser.stderr.count("\n") == 1
    digest = json.loads(winner.stdout)["digest"]
    for hub in replicas.hubs:
        head = httpx.head(f"{hub.url}/v2/acme/race/manifests/v1", headers={"Authorization": f"Bearer {token}"})
        assert head.status_code == 200 and head.headers["docker-content-digest"] == digest


def test_gc_on_one_replica_during_a_push_on_the_other_loses_nothing(replicas, tmp_path):
    sources = make_sources(tmp_path / "src", data_mib=24)
    alice = User(tmp_path / "alice", replicas.hubs[0], FORKD_UPLOAD_PART_BYTES=str(MiB))
    replicas.login(alice, replicas.token("alice", "push:acme/*"))
    _import(alice, sources, ["base", "numpy", "pandas"])
    push = alice.start("push", "pandas", replicas.ref(1, "acme/py:v1"), "--quiet")
    env = {**os.environ, **replicas.env, "FORKD_HUB_DATA_DIR": str(replicas.hubs[0].data_dir)}
    runs = 0
    while push.poll() is None or runs == 0:
        gc = subprocess.run(forkd_hub("gc", "--json"), env=env, capture_output=True, text=True, timeout=120)
        assert gc.returncode == 0 or "another garbage collection is running" in gc.stderr, gc.stderr
        runs += gc.returncode == 0
    assert push.wait() == 0, push.stderr.read() if push.stderr else ""

    bob = User(tmp_path / "bob", replicas.hubs[0])
    replicas.login(bob, replicas.token("bob", "pull:acme/*"))
    bob.run("pull", replicas.ref(0, "acme/py:v1"), "--as", "pandas")
    chain = bob.json("inspect", "pandas")
    for src, tag in zip(sources, [*chain["ancestors"], "pandas"], strict=True):
        _same_files(bob, tag, src)
