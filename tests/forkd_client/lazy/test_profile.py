"""The head of an access profile: what a lazy fork fetches before its children run."""

from __future__ import annotations

import pytest

from forkd_client.lazy.plan import ChunkSource, ImagePlan
from forkd_client.lazy.profile import profile_head


def _plan(frames: list[int | None]) -> ImagePlan:
    """An image of 64 KiB chunks whose chunk ``i`` is a frame of ``frames[i]`` bytes (None: zero)."""
    sources = [
        None if n is None else ChunkSource("sha256:l", "acme/vm", "sha256:b", 1000 * i, n, f"blake3:{i}")
        for i, n in enumerate(frames)
    ]
    return ImagePlan(len(frames) << 16, 1 << 16, sources)


def test_the_head_is_the_longest_prefix_whose_frames_fit_the_limit():
    plan = _plan([100, 200, None, 300, 400])
    order = [3, 0, 2, 1, 4]  # 300, 100, zero, 200, 400 bytes
    assert profile_head(plan, order, 0) == 0
    assert profile_head(plan, order, 299) == 0
    assert profile_head(plan, order, 300) == 1
    assert profile_head(plan, order, 400) == 3  # a zero chunk costs nothing
    assert profile_head(plan, order, 599) == 3
    assert profile_head(plan, order, 600) == 4
    assert profile_head(plan, order, 10_000) == 5


def test_indexes_outside_the_image_cost_nothing():
    plan = _plan([100, 100])
    assert profile_head(plan, [-1, 7, 0, 1], 100) == 3


def test_a_document_is_the_profile_of_the_file_it_names():
    from forkd_client.lazy.profile import parse_profile, profile_document

    disk = profile_document(1 << 16, [5, 2, 5], "rootfs.ext4")
    assert parse_profile(disk, 1 << 16, 8, "rootfs.ext4") == [5, 2]
    with pytest.raises(ValueError, match=r"not an access profile of memory\.bin"):
        parse_profile(disk, 1 << 16, 8)
    with pytest.raises(ValueError, match=r"not an access profile of rootfs\.ext4"):
        parse_profile(profile_document(1 << 16, [1]), 1 << 16, 8, "rootfs.ext4")
