"""Settings: flags over FORKD_HUB_* variables over defaults; limits; clear errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from hub_server.settings import Limits, SettingsError, load_settings, parse_duration, parse_size


def test_embedded_defaults_live_in_the_data_dir(tmp_path):
    s = load_settings({"data_dir": str(tmp_path)}, env={})
    assert s.data_dir == tmp_path.resolve()
    assert s.database_url == f"sqlite+aiosqlite:///{tmp_path.resolve() / 'hub.db'}"
    assert s.storage == f"filesystem root={tmp_path.resolve() / 'blobs'}"
    assert s.audit_log == tmp_path.resolve() / "audit.jsonl"
    assert (s.host, s.port, s.log_level, s.gc_interval) == ("127.0.0.1", 8080, "info", None)
    assert s.limits == Limits()
    assert s.limits.manifest_bytes == 4 << 20 and s.limits.chunk_map_bytes == 64 << 20
    assert s.limits.chain_depth == 32 and s.limits.chunks_per_query == 10_000 and s.limits.ranges_per_request == 256
    assert s.limits.upload_lifetime == timedelta(hours=24) and s.limits.blob_bytes == 64 << 30
    assert s.limits.gc_grace == timedelta(hours=1)


def test_default_data_dir_matches_the_token_cli(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert load_settings({}, env={}).data_dir == tmp_path / "forkd-hub-data"


def test_flags_override_env_override_defaults(tmp_path):
    env = {
        "FORKD_HUB_DATA_DIR": str(tmp_path / "env"),
        "FORKD_HUB_PORT": "9000",
        "FORKD_HUB_HOST": "0.0.0.0",
        "FORKD_HUB_STORAGE": "memory",
        "FORKD_HUB_GC_INTERVAL": "6h",
        "FORKD_HUB_MANIFEST_BYTES": "2MiB",
        "FORKD_HUB_CHAIN_DEPTH": "8",
        "FORKD_HUB_GC_GRACE": "30m",
        "FORKD_HUB_PUBLIC_URL": "https://hub.example/",
        "FORKD_HUB_SWARM_WINDOW": "0",
    }
    s = load_settings({"port": "9100", "data_dir": None}, env=env)
    assert s.swarm_window == 0
    assert s.port == 9100 and s.host == "0.0.0.0" and s.data_dir == (tmp_path / "env").resolve()
    assert s.storage == "memory" and s.gc_interval == 6 * 3600 and s.public_url == "https://hub.example"
    assert s.limits.manifest_bytes == 2 << 20 and s.limits.chain_depth == 8
    assert s.limits.gc_grace == timedelta(minutes=30)
    assert s.database_url.endswith(str(Path("env") / "hub.db"))


@pytest.mark.parametrize(
    ("flags", "env", "needle"),
    [
        ({"port": "http"}, {}, "--port"),
        ({}, {"FORKD_HUB_PORT": "70000"}, "FORKD_HUB_PORT"),
        ({}, {"FORKD_HUB_LOG_LEVEL": "loud"}, "FORKD_HUB_LOG_LEVEL"),
        ({}, {"FORKD_HUB_CHAIN_DEPTH": "0"}, "FORKD_HUB_CHAIN_DEPTH"),
        ({}, {"FORKD_HUB_BLOB_BYTES": "lots"}, "FORKD_HUB_BLOB_BYTES"),
        ({}, {"FORKD_HUB_SWARM_WINDOW": "11"}, "FORKD_HUB_SWARM_WINDOW"),
        ({"colour": "blue"}, {}, "colour"),
    ],
)
def test_bad_values_name_their_source(flags, env, needle, tmp_path):
    with pytest.raises(SettingsError, match=needle):
        load_settings({"data_dir": str(tmp_path), **flags}, env=env)


def test_sizes_and_durations():
    assert parse_size("1048576") == 1 << 20 and parse_size("64GiB") == 64 << 30 and parse_size("1 MiB") == 1 << 20
    assert parse_size("4k") == 4096
    assert parse_duration("3600") == timedelta(hours=1) == parse_duration("1h") == parse_duration("60m")
    assert parse_duration("2d") == timedelta(days=2) and parse_duration("1.5s") == timedelta(seconds=1.5)
    for bad in ("", "1x", "-1h"):
        with pytest.raises(SettingsError):
            parse_duration(bad)


def test_workers_and_cache_ttl() -> None:
    """Issue 15: ``--workers`` is a positive count, ``--cache-ttl`` a duration where 0 turns the caches off."""
    settings = load_settings({"workers": "2", "cache_ttl": "500ms"}, env={})
    assert (settings.workers, settings.cache_ttl) == (2, 0.5)
    assert load_settings({}, env={"FORKD_HUB_CACHE_TTL": "0"}).cache_ttl == 0
    assert (load_settings({}, env={}).workers, load_settings({}, env={}).cache_ttl) == (1, 2.0)
    with pytest.raises(SettingsError, match="FORKD_HUB_WORKERS"):
        load_settings({}, env={"FORKD_HUB_WORKERS": "0"})
