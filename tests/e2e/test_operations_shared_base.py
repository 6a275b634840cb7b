"""Issue 28 item 4: the first push of a shared base into a new repository mounts what the hub holds.

Eight users push, at once and through the load balancer, their own link on one published base into eight new
repositories. Each base blob is mounted from the repository the token may read (a cross-repository mount: no
bytes, no re-verification by the hub), so every push succeeds and sends at most 1.1x what pushing its new link
alone costs — measured in the same run, by a push of the same shape into the repository that holds the base.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.e2e.deployment import Deployment
from tests.e2e.test_push_pull_cli import MiB, User

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("operations-shared-base")]

USERS = 8


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    d = Deployment(tmp_path_factory.mktemp("shared")).start()
    yield d
    d.stop()


MEMORY = 256 * MiB
DATA = 32 * MiB


def _base(root: Path) -> Path:
    """A 256 MiB sparse memory image holding 32 MiB of data: 4,096 chunks, 512 of them stored."""
    base = root / "base"
    base.mkdir(parents=True)
    with open(base / "memory.bin", "wb") as f:
        f.truncate(MEMORY)
        f.seek(MiB)
        f.write(os.urandom(DATA))
    (base / "vmstate").write_bytes(b"vmstate-base" * 500)
    return base


def _link(root: Path, base: Path, name: str) -> Path:
    """A link on ``base`` that rewrites 1 MiB of its memory (sparse, like the base)."""
    src = root / name
    src.mkdir(parents=True)
    with open(base / "memory.bin", "rb") as f:
        data = f.read(MiB + DATA)
    with open(src / "memory.bin", "wb") as f:
        f.truncate(MEMORY)
        f.seek(MiB)
        f.write(data[MiB : 4 * MiB] + os.urandom(MiB) + data[5 * MiB :])
    (src / "vmstate").write_bytes(f"vmstate-{name}".encode() * 500)
    return src


def _user(deployment: Deployment, name: str, token: str, base: Path, link: Path) -> User:
    user = deployment.user(name, token)
    user.run("import", str(base), "base")
    user.run("import", str(link), "app", "--parent", "base")
    return user


def test_eight_first_pushes_of_one_base_into_new_repositories_mount_it(deployment, tmp_path):
    token = deployment.token("ci", "push:acme/*")
    base = _base(tmp_path)
    publisher = _user(deployment, "publisher", token, base, _link(tmp_path, base, "publisher"))
    publisher.run("push", "base", "acme/base:v1")
    # what the new link alone costs: the same shape pushed where the base already is
    reference = json.loads(publisher.run("push", "app", "acme/base:app", "--json").stdout)
    assert [link["skipped"] for link in reference["links"]] == [True, False]
    alone = reference["bytes_sent"]

    users = [_user(deployment, f"u{i}", token, base, _link(tmp_path, base, f"u{i}")) for i in range(USERS)]
    results: list[subprocess.CompletedProcess | None] = [None] * USERS

    def push(i: int) -> None:
        results[i] = users[i].run("push", "app", f"acme/app{i}:v1", "--json", check=False)

    threads = [threading.Thread(target=push, args=(i,)) for i in range(USERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, done in enumerate(results):
        assert done is not None and done.returncode == 0, (i, done and done.stderr[-2000:])
        pushed = json.loads(done.stdout)
        base_link, app_link = pushed["links"]
        # its data, chunk map and vmstate were mounted: only its config (which records when this user imported
        # the base, so it is new content) went up, a few hundred bytes of a 32 MiB base
        assert base_link["skipped"] is False and base_link["bytes_uploaded"] < 4096, base_link
        assert pushed["bytes_sent"] <= 1.1 * alone, (i, pushed["bytes_sent"], alone)
        assert app_link["bytes_uploaded"] > MiB // 2  # the new link's bytes did go up

    puller = deployment.user("puller", deployment.token("puller", "pull:acme/*"))
    puller.run("pull", "acme/app3:v1", "--as", "app")
    pulled = (puller.home / "snapshots" / "app" / "memory.bin").read_bytes()
    assert pulled == (tmp_path / "u3" / "memory.bin").read_bytes()
