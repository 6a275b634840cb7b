"""Recording an access profile from a local image served through the lazy mount (no VMM needed)."""

from __future__ import annotations

import os

import pytest

from forkd_client.lazy.fusefs import LazyMount
from forkd_client.lazy.record import RecordingImage

CS = 64 << 10


@pytest.fixture
def image_file(tmp_path):
    path = tmp_path / "memory.bin"
    path.write_bytes(os.urandom(10 * CS + 123))  # the last chunk is short
    return path


@pytest.mark.integration  # mounts a FUSE file (tests/tiers.py)
def test_reads_through_the_mount_return_the_file_and_record_first_touches_in_order(image_file, tmp_path):
    want = image_file.read_bytes()
    image = RecordingImage(image_file, CS)
    mount = LazyMount(image, tmp_path / "mnt")
    try:
        with open(mount.path, "rb", buffering=0) as f:
            for offset, size in ((7 * CS + 5, 100), (2 * CS, CS + 1), (7 * CS, 10), (10 * CS, 4096)):
                f.seek(offset)
                assert f.read(size) == want[offset : offset + size]
    finally:
        mount.unmount()
        image.close()
    # the kernel reads whole pages and may read ahead, but first touches keep the order of the reads
    profile = image.profile
    assert profile[0] == 7 and profile.index(7) < profile.index(2) < profile.index(3) < profile.index(10)
    assert len(profile) == len(set(profile))


def test_reads_past_the_end_are_empty_and_record_nothing(image_file):
    image = RecordingImage(image_file, CS)
    try:
        assert image.read(image.size, 10) == b""
        assert image.read(image.size - 3, 10) == image_file.read_bytes()[-3:]
        assert image.profile == [10]
    finally:
        image.close()


def test_a_chunk_size_that_is_not_positive_is_refused(image_file):
    with pytest.raises(ValueError, match="chunk size must be positive"):
        RecordingImage(image_file, 0)
