"""Issue 30 items 8 and 9: what ``forkd`` says when the URL is not a hub, when a token lacks the scope it
needs, and when the hub refuses a push (real hub process, real CLI processes, a real plain web server)."""

from __future__ import annotations

import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.e2e.hubproc import HubProcess
from tests.e2e.test_push_pull_cli import User

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hints-hub")
    h = HubProcess(root / "hub", root / "hub.log")
    yield h
    assert h.stop() == 0


@pytest.fixture
def plain_web_server(tmp_path):
    """Any web server that is not a hub: it answers ``GET /v2/`` with a 404 page."""
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text("<h1>hello</h1>")

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path / "www"), **kwargs)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()
    server.server_close()


def user(tmp_path: Path, hub: HubProcess, token: str | None = None) -> User:
    u = User(tmp_path, hub, FORKD_PROGRESS_INTERVAL="3600")
    if token is not None:
        u.run("login", hub.url, "--token-stdin", input=token + "\n")
    return u


def snapshot(u: User, root: Path, tag: str, seed: int) -> None:
    src = root / f"src-{tag}"
    src.mkdir(parents=True)
    with open(src / "memory.bin", "wb") as f:
        f.truncate(1 << 20)
        f.write(bytes([seed]) * 4096 + os.urandom(60000))
    (src / "vmstate").write_bytes(b"vm%d" % seed * 100)
    u.run("import", str(src), tag)


def test_login_to_a_web_server_that_is_not_a_hub_asks_if_it_is_one(hub, tmp_path, plain_web_server):
    u = user(tmp_path, hub)
    out = u.run("login", plain_web_server, "--token-stdin", input="fkd_" + "x" * 43 + "\n", check=False)
    assert out.returncode == 1, out.stderr
    assert f"{plain_web_server} does not look like a forkd hub (GET /v2/ answered HTTP 404)" in out.stderr
    assert "is this a forkd hub?" in out.stderr and "failed with HTTP 404" not in out.stderr
    assert "Login succeeded" not in out.stdout


def test_a_token_without_pull_scope_is_told_so_not_only_not_found(hub, tmp_path):
    owner = user(tmp_path / "owner", hub, hub.token("owner30", "push:acme/*"))
    snapshot(owner, tmp_path, "base", 1)
    owner.run("push", "-q", "base", "acme/secret30:v1")
    other = user(tmp_path / "other", hub, hub.token("beta30", "push:beta/*"))
    out = other.run("pull", "acme/secret30:v1", check=False)
    assert out.returncode == 1, out.stderr
    assert "repository acme/secret30 not found" in out.stderr
    assert "this token (beta30) cannot see it: its scopes (push:beta/*) have no pull on it" in out.stderr
    assert "'pull:acme/secret30' or 'pull:acme/*'" in out.stderr
    missing = owner.run("pull", "acme/nothing30:v1", check=False)  # a token that could pull: no scope hint
    assert missing.returncode == 1 and "scopes" not in missing.stderr


def test_a_push_outside_the_tokens_scope_is_refused_before_anything_is_built(hub, tmp_path):
    reader = user(tmp_path, hub, hub.token("reader30", "pull:acme/*"))
    snapshot(reader, tmp_path, "base", 2)
    out = reader.run("push", "base", "acme/py30:v1", check=False)
    assert out.returncode == 3, out.stderr  # auth
    assert "acme/py30: this token (reader30) may not push there (its scopes: pull:acme/*)" in out.stderr
    assert "nothing was built or sent" in out.stderr
    assert "computing layer" not in out.stderr and "push base" not in out.stderr  # no layer was built


def test_a_hub_refusal_is_labelled_a_refusal_not_an_interruption(hub, tmp_path):
    owner = user(tmp_path, hub, hub.token("imm30", "push:acme/*"))
    snapshot(owner, tmp_path, "one", 3)
    snapshot(owner, tmp_path, "two", 4)
    owner.run("push", "one", "acme/imm30:v1")
    admin = hub.token("admin30", "admin")
    made = httpx.patch(
        f"{hub.url}/api/v1/repositories/acme/imm30",
        json={"immutableTags": True},
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert made.status_code == 200, made.text
    out = owner.run("push", "two", "acme/imm30:v1", check=False)
    assert out.returncode == 4, out.stderr  # conflict: the tag is immutable
    assert "interrupted" not in out.stderr
    assert "refused by the hub after" in out.stderr, out.stderr
    assert "is immutable" in out.stderr and "push under a new tag" in out.stderr
    assert "--force" not in out.stderr  # it cannot move an immutable tag
