"""A batch of uploaded frames is checked on several threads, the blob's sha256 still in order."""

from __future__ import annotations

import hashlib
import random
import threading

import blake3
import pytest
import zstandard

from hub_server.errors import ErrorCode, HubError
from hub_server.registry.push import framecheck
from hub_server.registry.push.framecheck import check_frames
from hub_server.registry.push.packs import RecipeFrameSpec
from manifest.digest import Hasher

CHUNK = 64 << 10


def frames(count: int, seed: int = 1) -> list[tuple[RecipeFrameSpec, bytes, int]]:
    """``count`` real frames (every third one held: hashed, not checked), in recipe order."""
    rng = random.Random(seed)
    zc = zstandard.ZstdCompressor(level=3, write_content_size=True, write_checksum=False)
    out = []
    for index in range(count):
        chunk = rng.randbytes(CHUNK // 2) + bytes(CHUNK // 2)
        frame = zc.compress(chunk)
        spec = RecipeFrameSpec(
            "blake3:" + blake3.blake3(frame).hexdigest(),
            "blake3:" + blake3.blake3(chunk).hexdigest(),
            len(chunk),
            len(frame),
            index % 3 != 2,
        )
        out.append((spec, frame, index))
    return out


def test_the_checks_of_a_batch_run_on_several_threads_and_the_sha256_stays_in_order(monkeypatch):
    if framecheck.CHECK_THREADS < 2:
        pytest.skip("one core: the batch is checked on the calling thread")
    seen: set[str] = set()
    real = framecheck.decompress_chunk

    def recording(*args, **kwargs):
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(framecheck, "decompress_chunk", recording)
    items = frames(64)
    hasher = Hasher("sha256")
    check_frames(hasher, items)
    assert str(hasher.digest()) == "sha256:" + hashlib.sha256(b"".join(f for _, f, _ in items)).hexdigest()
    assert threading.current_thread().name in seen  # the first part, here
    assert any(name.startswith("frame-check") for name in seen)  # the others, beside it


@pytest.mark.parametrize("bad", [[4], [40, 7], [63]])
def test_the_first_bad_frame_of_a_batch_is_the_one_named(bad):
    items = frames(64)
    for index in bad:
        spec, data, _ = items[index]
        items[index] = (spec, data[:-1] + bytes([data[-1] ^ 1]), index)
    with pytest.raises(HubError) as caught:
        check_frames(Hasher("sha256"), items)
    assert caught.value.code == ErrorCode.DIGEST_INVALID
    assert caught.value.detail["frame"] == min(bad)


def test_a_frame_that_does_not_hold_its_chunk_is_refused():
    items = frames(16)
    spec, data, index = items[4]
    items[4] = (RecipeFrameSpec(spec.digest, "blake3:" + "00" * 32, spec.raw_length, spec.length, True), data, index)
    with pytest.raises(HubError, match="recipe frame 4 does not hold its chunk"):
        check_frames(Hasher("sha256"), items)
