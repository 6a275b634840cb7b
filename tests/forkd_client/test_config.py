from __future__ import annotations

from pathlib import Path

from forkd_client.config import forkd_home


def test_forkd_home_wins() -> None:
    env = {"FORKD_HOME": "/srv/forkd", "XDG_DATA_HOME": "/x", "HOME": "/home/u"}
    assert forkd_home(env) == Path("/srv/forkd")


def test_xdg_data_home_matches_forkd_data_dir() -> None:
    assert forkd_home({"XDG_DATA_HOME": "/x", "HOME": "/home/u"}) == Path("/x/forkd")


def test_home_fallback_and_empty_values_count_as_unset() -> None:
    env = {"FORKD_HOME": "", "XDG_DATA_HOME": "", "HOME": "/home/u"}
    assert forkd_home(env) == Path("/home/u/.local/share/forkd")
    assert forkd_home({}) == Path("/tmp/.local/share/forkd")


def test_reads_the_process_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FORKD_HOME", str(tmp_path))
    assert forkd_home() == tmp_path
