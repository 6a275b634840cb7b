"""The resumable SHA-256: a state saved mid-stream and resumed elsewhere gives hashlib's digest."""

from __future__ import annotations

import hashlib
import os

import pytest

from hub_server.registry.push.sha256state import AVAILABLE, STATE_BYTES, ResumableSha256


def test_libcrypto_is_there_on_the_machines_we_run_on():
    assert AVAILABLE  # else every declared upload falls back to verifying at the finish


@pytest.mark.parametrize("cut", [0, 1, 63, 64, 65, 1000, 99_999])
def test_a_state_resumed_at_any_point_gives_hashlibs_digest(cut):
    data = os.urandom(100_000)
    first = ResumableSha256()
    first.update(data[:cut])
    state = first.state()
    assert len(state) == STATE_BYTES
    resumed = ResumableSha256(state, first.size)
    resumed.update(memoryview(data)[cut : cut + 10])
    resumed.update(bytearray(data[cut + 10 :]))
    assert resumed.size == len(data)
    assert resumed.digest() == "sha256:" + hashlib.sha256(data).hexdigest()
    assert resumed.hexdigest() == resumed.hexdigest()  # reading the digest does not finish the hash


def test_a_state_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="112 bytes, not 3"):
        ResumableSha256(b"abc")
