"""``forkd-hub repo list|show|set|delete-tag`` in-process, on a real data directory: the API's services, limits
and audit events, typed one-line errors, JSON as the API answers."""

from __future__ import annotations

import io
import json

from litestar.testing import TestClient

from hub_server.app import create_app
from hub_server.cli import main
from hub_server.registry.read.catalog import MAX_DESCRIPTION
from hub_server.settings import Settings
from tests.hub_server.pushing import PushClient


def _hub(tmp_path, images) -> tuple[str, list[str]]:
    """acme/ci (private: base tagged ``base``, head tagged ``v1`` and ``latest``) and acme/web, other/tools (public,
    empty descriptions)."""
    data = tmp_path / "data"
    with TestClient(create_app(Settings.for_data_dir(data))) as client:
        token = client.blocking_portal.call(client.app.state.tokens.create, "admin", ["admin"], None)
        pusher = PushClient(client, token)
        layers = pusher.push_chain("acme/ci", images[:2], tmp_path / "p", "v1")
        pusher.push_layer("acme/ci", layers[0], "base")
        pusher.push_layer("acme/ci", layers[1], "latest")
        pusher.push_chain("acme/web", images[:1], tmp_path / "w", "v1", public=True)
        pusher.push_chain("other/tools", images[:1], tmp_path / "o", "v1", public=True)
    return str(data), [layer.digest for layer in layers]


def _audit(data: str, capsys, action: str) -> list[dict]:
    """The audit events of ``action``, oldest first."""
    assert main(["audit", "--json", "--action", action, "--data-dir", data]) == 0
    return json.loads(capsys.readouterr().out)[::-1]


def test_list_shows_private_and_public_repositories_and_filters_by_namespace(tmp_path, images, capsys):
    data, _ = _hub(tmp_path, images)
    assert main(["repo", "list", "--data-dir", data]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["REPOSITORY", "VISIBILITY", "TAGS", "UPDATED", "DESCRIPTION"]
    assert [(line.split()[0], line.split()[1], line.split()[2]) for line in lines[1:]] == [
        ("acme/ci", "private", "3"),
        ("acme/web", "public", "1"),
        ("other/tools", "public", "1"),
    ]

    assert main(["repo", "list", "acme", "--json", "--data-dir", data]) == 0
    listed = json.loads(capsys.readouterr().out)["repositories"]
    assert [(r["name"], r["public"], r["tags"]) for r in listed] == [
        ("acme/ci", False, ["base", "latest", "v1"]),
        ("acme/web", True, ["v1"]),
    ]

    assert main(["repo", "list", "Bad!", "--data-dir", data]) == 1
    err = capsys.readouterr().err
    assert err.startswith("forkd-hub: error: invalid") and err.count("\n") == 1


def test_show_prints_what_the_api_answers_and_names_an_unknown_repository(tmp_path, images, capsys):
    data, digests = _hub(tmp_path, images)
    assert main(["repo", "show", "acme/ci", "--json", "--data-dir", data]) == 0
    shown = json.loads(capsys.readouterr().out)
    with TestClient(create_app(Settings.for_data_dir(tmp_path / "data"))) as client:
        token = client.blocking_portal.call(client.app.state.tokens.create, "reader", ["pull:acme/*"], None)
        api = client.get("/api/v1/repositories/acme/ci", headers={"Authorization": f"Bearer {token}"}).json()
    assert shown == api
    assert [(t["name"], t["digest"]) for t in shown["tags"]] == [
        ("base", digests[0]),
        ("latest", digests[1]),
        ("v1", digests[1]),
    ]

    assert main(["repo", "show", "acme/ci", "--data-dir", data]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("acme/ci (private), 3 tag(s), pulled ")
    assert out[1:3] == ["description: (none)", "readme: (none)"]
    assert "immutable tags: off (the hub default)" in out

    assert main(["repo", "show", "acme/nope", "--data-dir", data]) == 1
    assert capsys.readouterr().err == "forkd-hub: error: repository acme/nope not found\n"
    assert main(["repo", "show", "acme", "--data-dir", data]) == 1
    assert "invalid" in capsys.readouterr().err


def test_set_changes_visibility_description_and_readme_audited_as_the_api(tmp_path, images, capsys, monkeypatch):
    data, _ = _hub(tmp_path, images)
    readme = tmp_path / "README.md"
    readme.write_text("# CI images\r\n\r\nBuilt nightly.\r\n")
    args = ["repo", "set", "acme/ci", "--public", "--description", "CI *fixtures*", "--readme-file", str(readme)]
    assert main([*args, "--json", "--data-dir", data]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["public"], shown["description"], shown["readme"]) == (
        True,
        "CI *fixtures*",
        "# CI images\n\nBuilt nightly.\n",
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("from stdin\n"))
    assert main(["repo", "set", "acme/ci", "--readme", "-", "--private", "--data-dir", data]) == 0
    assert capsys.readouterr().out.splitlines()[1:3] == ["description: CI *fixtures*", "readme: 11 characters"]

    events = _audit(data, capsys, "visibility")
    assert [(e["repository"], e["actor"].startswith("cli:"), e["detail"]) for e in events] == [
        ("acme/ci", True, {"public": True, "description": "CI *fixtures*", "readme": "28 characters"}),
        ("acme/ci", True, {"public": False, "readme": "11 characters"}),
    ]

    # all or nothing: a description over the limit changes nothing, not even the visibility given with it
    too_long = "x" * (MAX_DESCRIPTION + 1)
    assert main(["repo", "set", "acme/ci", "--public", "--description", too_long, "--data-dir", data]) == 1
    err = capsys.readouterr().err
    assert err == "forkd-hub: error: description is over 4,096 characters\n"
    assert main(["repo", "set", "acme/ci", "--readme", str(tmp_path / "missing.md"), "--data-dir", data]) == 1
    assert "cannot read the README" in capsys.readouterr().err
    assert main(["repo", "set", "acme/ci", "--data-dir", data]) == 1
    assert "nothing to change" in capsys.readouterr().err
    assert main(["repo", "set", "acme/gone", "--public", "--data-dir", data]) == 1
    assert capsys.readouterr().err == "forkd-hub: error: repository acme/gone not found\n"
    assert main(["repo", "show", "acme/ci", "--json", "--data-dir", data]) == 0
    assert json.loads(capsys.readouterr().out)["public"] is False


def test_delete_tag_removes_one_tag_and_an_immutable_one_only_with_an_audited_override(tmp_path, images, capsys):
    data, digests = _hub(tmp_path, images)
    assert main(["repo", "delete-tag", "acme/ci:latest", "--data-dir", data]) == 0
    assert capsys.readouterr().out == "deleted acme/ci:latest\n"  # v1 still holds the manifest

    assert main(["repo", "policy", "acme/ci", "--immutable-tags", "on", "--data-dir", data]) == 0
    capsys.readouterr()
    assert main(["repo", "delete-tag", "acme/ci:v1", "--data-dir", data]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tag acme/ci:v1 is immutable" in err and "--allow-immutable" in err
    assert main(["repo", "delete-tag", "acme/ci:v1", "--allow-immutable", "--json", "--data-dir", data]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == [
        {"repository": "acme/ci", "digest": digests[1], "tags": ["v1"]}
    ]
    deletes = _audit(data, capsys, "delete")
    assert [(e["reference"], e["detail"].get("immutableOverride")) for e in deletes] == [
        ("latest", None),
        ("v1", True),
    ]

    for bad, message in [
        ("acme/ci", "is not NS/REPO:TAG"),
        ("acme/ci:bad tag", "invalid tag"),
        ("acme/ci@sha256:" + "0" * 64, "is not NS/REPO:TAG"),
        ("acme/gone:v1", "repository acme/gone not found"),
        ("acme/ci:never", "never"),
    ]:
        assert main(["repo", "delete-tag", bad, "--data-dir", data]) == 1, bad
        err = capsys.readouterr().err
        assert err.startswith("forkd-hub: error: ") and message in err and err.count("\n") == 1, (bad, err)
