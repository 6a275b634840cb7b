"""The client's mirrors (``FORKD_HUB_MIRRORS``, ``[mirrors]`` in config.toml): parsed with errors that name the
key; a pull reads through the first mirror that answers, skips one that is down or answers 5xx, falls back to
the hub; ``forkd pull --json`` names the mirror."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from forkd_client.cli.main import main
from forkd_client.hub.client import HubClient
from forkd_client.hub.mirrors import MirrorConfigError, load_mirrors, mirrors_for
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore
from hub_server.settings import Settings
from tests.services.httpserver import QuietHTTPServer
from tests.services.ports import free_port
from tests.services.servedapp import ServedHub
from tests.services.sqlite import seed

REF = Reference.parse("team/py:v1")


def test_the_environment_and_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[mirrors]\n"https://hub.example/" = ["http://127.0.0.1:5001", "http://127.0.0.1:5002/"]\n')
    assert load_mirrors({}, config) == {"https://hub.example": ["http://127.0.0.1:5001", "http://127.0.0.1:5002"]}
    env = {"FORKD_HUB_MIRRORS": "https://hub.example=http://m1:5001,http://m2:5001 https://b.example=http://m3"}
    assert load_mirrors(env, config) == {  # the environment wins over the file
        "https://hub.example": ["http://m1:5001", "http://m2:5001"],
        "https://b.example": ["http://m3"],
    }
    assert mirrors_for("https://b.example/", env, config) == ["http://m3"]
    assert mirrors_for("https://c.example", env, config) == []
    assert load_mirrors({}, tmp_path / "absent.toml") == {}


@pytest.mark.parametrize(
    ("env", "text", "message"),
    [
        ({"FORKD_HUB_MIRRORS": "https://hub.example"}, "", "FORKD_HUB_MIRRORS: 'https://hub.example' is not HUB_URL="),
        ({"FORKD_HUB_MIRRORS": "https://hub.example=ftp://m"}, "", "FORKD_HUB_MIRRORS: invalid hub URL 'ftp://m'"),
        ({}, "[mirrors\n", "config.toml: not valid TOML"),
        ({}, 'mirrors = "x"\n', r"config.toml: \[mirrors\] must be a table"),
        ({}, '[mirrors]\n"https://hub.example" = 5\n', "config.toml: mirrors.'https://hub.example': expected a list"),
        ({}, '[mirrors]\n"https://hub.example" = [5]\n', "config.toml: mirrors.'https://hub.example': 5 is not a URL"),
    ],
)
def test_a_bad_configuration_names_the_key(tmp_path: Path, env: dict[str, str], text: str, message: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text)
    with pytest.raises(MirrorConfigError, match=message):
        load_mirrors(env, config)


class _Failing(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def failing() -> Iterator[str]:
    server = QuietHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def hubs(tmp_path: Path, sqlite_template: Path, chain3: SnapshotStore) -> Iterator[tuple[ServedHub, ServedHub, str]]:
    """An upstream holding ``team/py:v1`` (chain3), a mirror of it (both served on 127.0.0.1), the pusher's token."""
    seed(tmp_path / "up", sqlite_template)
    upstream = ServedHub(replace(Settings.for_data_dir(tmp_path / "up"), storage="memory"))
    mirror = ServedHub(Settings.for_data_dir(tmp_path / "mirror", mirror_of=upstream.url))
    token = upstream.token("ci", "push:team/*")
    with HubClient(upstream.url, token) as client:
        push(chain3, client, "head", REF)
    yield upstream, mirror, token
    mirror.stop()
    upstream.stop()


def test_a_pull_skips_a_dead_and_a_failing_mirror_and_names_the_one_that_served(
    hubs: tuple[ServedHub, ServedHub, str], failing: str, tmp_path: Path
) -> None:
    upstream, mirror, token = hubs
    dead = f"http://127.0.0.1:{free_port()}"
    with HubClient(upstream.url, token, mirrors=[dead, failing, mirror.url]) as client:
        with SnapshotStore(tmp_path / "a") as store:
            result = pull(store, client, REF, as_tag="py")
        assert result.to_obj()["mirror"] == mirror.url
        assert client.mirror_route is not None and client.mirror_route.skipped == [dead, failing]
    fetched = mirror.app.state.mirror.metrics.value("forkd_mirror_upstream_fetches_total", kind="blob")
    assert fetched > 0
    # every mirror failing: the hub itself serves, and says so
    with HubClient(upstream.url, token, mirrors=[failing]) as client, SnapshotStore(tmp_path / "b") as store:
        assert pull(store, client, REF, as_tag="py").to_obj()["mirror"] is None


def test_forkd_pull_json_reads_through_the_configured_mirror(
    hubs: tuple[ServedHub, ServedHub, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    upstream, mirror, token = hubs
    monkeypatch.setenv("FORKD_HOME", str(tmp_path / "cli-home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("FORKD_TOKEN", token)
    (tmp_path / "xdg" / "forkd").mkdir(parents=True)
    (tmp_path / "xdg" / "forkd" / "config.toml").write_text(f'[mirrors]\n"{upstream.url}" = ["{mirror.url}"]\n')
    code = main(["pull", f"{upstream.url.removeprefix('http://')}/team/py:v1", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["mirror"] == mirror.url
    # forkd inspect REF reads through the mirror too (the manifest is a cache hit there now)
    metrics = mirror.app.state.mirror.metrics
    hits = metrics.value("forkd_mirror_hits_total", kind="manifest")
    assert main(["inspect", f"{upstream.url.removeprefix('http://')}/team/py:v1", "--json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert inspected["hub"] == upstream.url  # the hub is what the snapshot comes from; the mirror only carried it
    assert metrics.value("forkd_mirror_hits_total", kind="manifest") > hits
