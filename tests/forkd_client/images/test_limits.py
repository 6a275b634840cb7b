"""forkd_client/images/limits.py: defaults, and changing them for one run."""

from __future__ import annotations

import dataclasses

import pytest

from forkd_client.images.errors import InvalidSetting
from forkd_client.images.limits import DEFAULT_LIMITS, ImageLimits


def test_defaults_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_LIMITS.max_entries = 1  # type: ignore[misc]
    assert DEFAULT_LIMITS.replace(max_entries=5).max_entries == 5 and DEFAULT_LIMITS.max_entries == 1_000_000


def test_the_environment_changes_them():
    limits = ImageLimits.from_env(
        {"FORKD_IMAGE_LIMITS": "max_entries=2000000, max_unpacked_bytes=64GiB,max_header_bytes=512k"}
    )
    assert limits.max_entries == 2_000_000
    assert limits.max_unpacked_bytes == 64 << 30
    assert limits.max_header_bytes == 512 << 10
    assert ImageLimits.from_env({}) == DEFAULT_LIMITS


@pytest.mark.parametrize("text", ["max_entries", "nope=1", "max_entries=lots", "max_entries=1PB"])
def test_a_bad_setting_is_named(text):
    with pytest.raises(InvalidSetting, match="FORKD_IMAGE_LIMITS"):
        ImageLimits.from_env({"FORKD_IMAGE_LIMITS": text})
