"""Issue 30 "Manage from the CLI": ``forkd repo``, ``forkd token``, ``forkd audit`` with a user's own token,
and ``forkd login`` asking for the token on a terminal (real hub process, real CLI processes, a real pty)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time

import pytest

from tests.e2e.hubproc import HubProcess, forkd
from tests.e2e.test_hub_hints import snapshot, user

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("manage-hub")
    h = HubProcess(root / "hub", root / "hub.log")
    yield h
    assert h.stop() == 0


def test_login_on_a_terminal_asks_for_the_token_without_echoing_it(hub, tmp_path):
    u = user(tmp_path, hub)
    token = hub.token("typed", "pull:acme/*")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        forkd("login", hub.url),
        env=u.env,
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=slave,
        start_new_session=True,  # no controlling terminal: getpass reads the pty on stdin, as a terminal
    )
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120
    while b"Token for" not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            seen += os.read(master, 4096)
    assert b"Token for " + hub.url.encode() in seen, seen
    os.write(master, token.encode() + b"\n")
    out, _ = proc.communicate(timeout=120)
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.returncode == 0, seen
    assert b"Login succeeded" in out and token.encode() not in seen  # never echoed
    piped = u.run("login", hub.url, check=False)  # no terminal, no token: says how to give one
    assert piped.returncode == 2 and "--token-stdin" in piped.stderr


def test_repo_show_and_set_with_the_users_own_token(hub, tmp_path):
    owner = user(tmp_path / "owner", hub, hub.token("owner-m", "push:acme/*"))
    snapshot(owner, tmp_path, "base", 7)
    owner.run("push", "-q", "base", "acme/managed:v1")
    (tmp_path / "README.md").write_text("# Managed\n\nA **long** description.\n")
    out = owner.run(
        "repo",
        "set",
        "acme/managed",
        "--public",
        "--description",
        "# NumPy\n\nPython **3.12**",
        "--readme-file",
        str(tmp_path / "README.md"),
    )
    assert "acme/managed: public" in out.stdout and "description: NumPy · Python 3.12" in out.stdout
    shown = json.loads(owner.run("repo", "show", "acme/managed", "--json").stdout)
    assert shown["public"] is True and shown["readme"].startswith("# Managed")
    assert [t["name"] for t in shown["tags"]] == ["v1"]
    owner.run("repo", "set", "acme/managed", "--private")
    assert json.loads(owner.run("repo", "show", "acme/managed", "--json").stdout)["public"] is False

    reader = user(tmp_path / "reader", hub, hub.token("reader-m", "pull:acme/*"))
    refused = reader.run("repo", "set", "acme/managed", "--public", check=False)
    assert refused.returncode == 3, refused.stderr  # auth: the scope is the hub's to decide
    nothing = owner.run("repo", "set", "acme/managed", check=False)
    assert nothing.returncode == 2 and "nothing to change" in nothing.stderr
    tagged = owner.run("repo", "show", "acme/managed:v1", check=False)
    assert tagged.returncode == 2 and "name a repository (NS/REPO), not a tag" in tagged.stderr


def test_token_create_list_revoke_and_the_audit_log(hub, tmp_path):
    lead = user(tmp_path / "lead", hub, hub.token("lead-m", "push:team/*"))
    made = lead.run("token", "create", "ci-m", "--scope", "push:team/py", "--expires", "1d")
    secret = made.stdout.strip()
    assert secret.startswith("fkd_") and "shown this once" in made.stderr and secret not in made.stderr
    listed = json.loads(lead.run("token", "list", "--json").stdout)
    assert [t["name"] for t in listed] == ["lead-m", "ci-m"]
    wider = lead.run("token", "create", "x-m", "--scope", "push:*/*", check=False)
    assert wider.returncode == 3 and "cannot grant push:*/*" in wider.stderr
    ci = user(tmp_path / "ci", hub, secret)
    snapshot(ci, tmp_path, "base", 8)
    ci.run("push", "-q", "base", "team/py:v1")
    assert "Revoked token ci-m" in lead.run("token", "revoke", "ci-m").stdout
    assert [t["name"] for t in json.loads(lead.run("token", "list", "--json").stdout)] == ["lead-m"]
    audit = lead.run("audit", "team")
    lines = audit.stdout.splitlines()
    assert lines[0].split() == ["ID", "AT", "ACTOR", "ACTION", "REPOSITORY", "REFERENCE"]
    actions = [line.split()[3] for line in lines[1:] if not line.startswith("older")]
    assert actions[0] == "token.revoke" and "push" in actions and "token.create" in actions
    page = json.loads(lead.run("audit", "team", "--limit", "1", "--json").stdout)
    assert len(page["events"]) == 1 and page["nextBefore"] is not None
    outsider = user(tmp_path / "outsider", hub, hub.token("out-m", "pull:team/*"))
    assert outsider.run("audit", "team", check=False).returncode == 3
