"""Issue 27, item 6: ``forkd search`` and ``forkd inspect REF`` print what a hub supplies (descriptions,
annotations) without letting it drive the terminal: no escape sequence, no carriage return, no extra line."""

from __future__ import annotations

import json

import pytest

from forkd_client.cli import hub as hub_cli
from forkd_client.cli import inspect_remote
from forkd_client.cli.main import main
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from manifest.signature import EMPTY_CONFIG, EMPTY_CONFIG_BYTES

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[H\r\nforkd: error: your token expired, run forkd login EVIL\x9b0m\u202e"
CONTROL = "\x1b\x07\r\x9b\u202e"


@pytest.fixture
def hostile_hub(chain3, inproc_hub, monkeypatch):
    """acme/py:v1 with a hostile description and a referrer whose annotations are hostile."""
    token = inproc_hub.token("ci", "admin")
    client = inproc_hub.client(token)
    result = push(chain3, client, "head", Reference.parse("acme/py:v1"))
    http, headers = inproc_hub.http, {"Authorization": f"Bearer {token}"}
    r = http.patch("/api/v1/repositories/acme/py", json={"public": True, "description": HOSTILE}, headers=headers)
    assert r.status_code == 200, r.text
    head = result.links[-1]
    http.post(
        f"/v2/acme/py/blobs/uploads/?digest={EMPTY_CONFIG['digest']}", content=EMPTY_CONFIG_BYTES, headers=headers
    )
    referrer = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/vnd.example.note",
        "config": EMPTY_CONFIG,
        "layers": [],
        "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": head.digest, "size": 1},
        "annotations": {"note\x1b[31m": HOSTILE},
    }
    body = json.dumps(referrer).encode()
    r = http.put(
        "/v2/acme/py/manifests/note",
        content=body,
        headers={**headers, "Content-Type": "application/vnd.oci.image.manifest.v1+json"},
    )
    assert r.status_code == 201, r.text
    monkeypatch.setattr(hub_cli, "_client", lambda *a, **k: inproc_hub.client(token))
    monkeypatch.setattr(inspect_remote, "_client", lambda *a, **k: inproc_hub.client(token))
    return head.digest


def test_search_prints_a_hostile_description_as_visible_escapes(hostile_hub, capsys, tmp_path):
    assert main(["--home", str(tmp_path / "home"), "search", "py", "--hub", "http://testserver"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in CONTROL)
    assert "\\x1b]0;pwned" in out
    assert len(out.splitlines()) == 2  # the header and one row: the description printed no line of its own


def test_inspect_prints_hostile_annotations_as_visible_escapes(hostile_hub, capsys, tmp_path):
    assert main(["--home", str(tmp_path / "home"), "inspect", "acme/py:v1"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in CONTROL)
    assert "note\\x1b[31m: \\x1b]0;pwned" in out
    assert not any(line.startswith("forkd: error") for line in out.splitlines())
