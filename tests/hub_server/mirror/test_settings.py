"""The mirror's settings: flags and ``FORKD_HUB_MIRROR_*`` variables, bad values named."""

from __future__ import annotations

import pytest

from hub_server.settings import SettingsError, load_settings


def test_the_mirror_settings_and_their_defaults() -> None:
    plain = load_settings({}, env={})
    assert (plain.mirror_of, plain.mirror_cache_bytes, plain.mirror_tag_ttl, plain.mirror_auth_ttl) == (
        None,
        None,
        60.0,
        60.0,
    )
    env = {
        "FORKD_HUB_MIRROR_OF": "https://hub.example/",
        "FORKD_HUB_MIRROR_CACHE_BYTES": "2GiB",
        "FORKD_HUB_MIRROR_TAG_TTL": "5m",
        "FORKD_HUB_MIRROR_AUTH_TTL": "10s",
    }
    s = load_settings({}, env=env)
    assert (s.mirror_of, s.mirror_cache_bytes, s.mirror_tag_ttl, s.mirror_auth_ttl) == (
        "https://hub.example",
        2 << 30,
        300.0,
        10.0,
    )
    assert load_settings({"mirror_cache_bytes": "0"}, env={}).mirror_cache_bytes is None  # 0: unlimited


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"mirror_of": "hub.example"}, {}, "--mirror-of: not an http"),
        ({}, {"FORKD_HUB_MIRROR_OF": "ftp://hub.example"}, "FORKD_HUB_MIRROR_OF: not an http"),
        ({}, {"FORKD_HUB_MIRROR_CACHE_BYTES": "lots"}, "FORKD_HUB_MIRROR_CACHE_BYTES"),
        ({"mirror_tag_ttl": "soon"}, {}, "--mirror-tag-ttl"),
    ],
)
def test_a_bad_value_is_named(flags: dict[str, str], env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(flags, env=env)
