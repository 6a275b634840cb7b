"""The ``[peers]`` table of the client's config.toml (forkd_client/hub/peerconfig.py, peers.peer_options): its keys
are defaults the environment overrides one by one; a bad value, an unknown key or a token in the file is refused
naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkd_client.errors import UsageError
from forkd_client.hub.peers import PeerOptions, peer_options

TOKEN = {"FORKD_FLEET_TOKEN": "t"}


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_the_table_turns_peers_on_and_the_environment_wins_key_by_key(tmp_path: Path) -> None:
    path = config(tmp_path, '[peers]\nenabled = true\nhost = "h7"\ntimeout = 2\nstall = 1.5\n')
    assert peer_options(False, env=TOKEN, config=path) == PeerOptions("t", 2.0, "h7", 1.5)
    env = {**TOKEN, "FORKD_PEERS_HOST": "h8", "FORKD_PEERS_STALL": "4"}
    assert peer_options(False, env=env, config=path) == PeerOptions("t", 2.0, "h8", 4.0)
    assert peer_options(False, env={**TOKEN, "FORKD_PEERS": "0"}, config=path) is None
    assert peer_options(False, env=TOKEN, config=tmp_path / "none.toml") is None  # no file: off
    with pytest.raises(UsageError, match="FORKD_FLEET_TOKEN"):  # the token never comes from the file
        peer_options(False, env={}, config=path)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[peers]\ntimeout = 0\n", "peers.timeout"),
        ('[peers]\nstall = "soon"\n', "peers.stall"),
        ('[peers]\nenabled = "yes"\n', "peers.enabled"),
        ('[peers]\nfleet_token = "s"\n', "peers.fleet_token"),
        ("[peers]\nspeed = 3\n", "peers.speed"),
        ("peers = 3\n", "[peers]"),
        ("[peers\n", "not valid TOML"),
    ],
)
def test_bad_values_are_refused_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(UsageError, match=key.replace("[", r"\[").replace("]", r"\]")):
        peer_options(True, env=TOKEN, config=config(tmp_path, text))


def test_a_pull_may_let_the_hub_hold_its_ask_less_than_the_hub_s_window(tmp_path: Path) -> None:
    none = tmp_path / "none.toml"
    assert peer_options(True, env={**TOKEN, "FORKD_PEERS_WINDOW": "0.25"}, config=none).window == 0.25  # type: ignore[union-attr]
    assert peer_options(True, env=TOKEN, config=none).window is None  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="FORKD_PEERS_WINDOW"):
        peer_options(True, env={**TOKEN, "FORKD_PEERS_WINDOW": "11"}, config=none)
