"""Issue 16 items 10 and 15: what a newcomer meets with ``forkd`` against a real hub process.

References like docker's, the hub each command talks to, login keeping the default hub, and
errors that say what to do (real CLI processes; their stderr is what a person reads).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.test_push_pull_cli import User

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("newcomer-hub")
    h = HubProcess(root / "hub", root / "hub.log")
    yield h
    assert h.stop() == 0


def newcomer(tmp_path: Path, hub: HubProcess) -> User:
    user = User(tmp_path, hub)
    del user.env["FORKD_HUB_URL"]  # a newcomer has only what login stores
    return user


def test_login_errors_say_what_happened(hub, tmp_path):
    user = newcomer(tmp_path, hub)
    empty = user.run("login", hub.url, "--token-stdin", input="", check=False)
    assert empty.returncode == 1
    assert "--token-stdin: standard input was empty" in empty.stderr
    bad = user.run("login", hub.url, "--token-stdin", input="fkd_" + "x" * 43 + "\n", check=False)
    assert bad.returncode == 3 and f"{hub.url} refused this token" in bad.stderr
    assert "run 'forkd login'" not in bad.stderr  # that is what the user just did
    assert "Traceback" not in empty.stderr + bad.stderr


def test_an_anonymous_read_of_a_private_repository_says_to_log_in(hub, tmp_path):
    """Issue 16 item 15, under the OCI auth rule (issue 12): an anonymous read of a repository it
    may not read is challenged (401, existing or not), and the client says how to log in."""
    owner = newcomer(tmp_path / "owner", hub)
    owner.run("login", hub.url, "--token-stdin", input=hub.token("owner", "push:acme/*") + "\n")
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "memory.bin", "wb") as f:
        f.truncate(1 << 20)
        f.write(os.urandom(65536))
    (src / "vmstate").write_bytes(b"vm" * 100)
    owner.run("import", str(src), "base")
    quiet = owner.run("push", "-q", "base", "acme/private:v1")  # -q: the digest alone, nothing on stderr
    assert re.fullmatch(r"(blake3|sha256):[0-9a-f]{64}\n", quiet.stdout) and quiet.stderr == ""
    stranger = newcomer(tmp_path / "stranger", hub)
    gone = stranger.run("pull", f"127.0.0.1:{hub.port}/acme/private:v1", check=False)
    assert gone.returncode == 3  # auth: the hub challenged an anonymous read
    assert "authentication required to read acme/private (run 'forkd login' or set FORKD_TOKEN)" in gone.stderr
    assert f"Using hub {hub.url} (named in the reference, anonymous)" in gone.stderr
    logged_in_elsewhere = owner.run("pull", "acme/nothing:v1", check=False)  # with a token: no such hint
    assert logged_in_elsewhere.returncode == 1 and "logging in may help" not in logged_in_elsewhere.stderr
    assert "forkd login" not in logged_in_elsewhere.stderr
    assert f"Using hub {hub.url} (the default login)" in logged_in_elsewhere.stderr


def test_push_refuses_a_digest_and_references_follow_dockers_host_rule(hub, tmp_path):
    user = newcomer(tmp_path, hub)
    user.run("login", hub.url, "--token-stdin", input=hub.token("u", "push:acme/*") + "\n")
    pinned = user.run("push", "base", "acme/py@blake3:" + "a" * 64, check=False)
    assert pinned.returncode == 2 and "push to a tag, not a digest" in pinned.stderr
    three = user.run("pull", "hub/acme/py", check=False)
    assert three.returncode == 2 and "'hub' is not a host" in three.stderr


def test_a_second_login_does_not_change_the_default_hub(hub, tmp_path):
    user = newcomer(tmp_path, hub)
    first = user.run("login", hub.url, "--token-stdin", input=hub.token("a", "pull:acme/*") + "\n")
    assert f"Default hub: {hub.url}" in first.stdout
    other = HubProcess(tmp_path / "other", tmp_path / "other.log")
    try:
        second = user.run("login", other.url, "--token-stdin", input=other.token("b", "pull:acme/*") + "\n")
        assert (
            f"Default hub stays {hub.url} (make it {other.url} with 'forkd login {other.url} --default')"
            in second.stdout
        )
        search = user.run("search")
        assert f"Using hub {hub.url} (the default login)" in search.stderr
        switched = user.run(
            "login", other.url, "--default", "--token-stdin", input=other.token("c", "pull:acme/*") + "\n"
        )
        assert f"Default hub: {other.url}" in switched.stdout
        assert f"Using hub {other.url}" in user.run("search").stderr
    finally:
        assert other.stop() == 0
