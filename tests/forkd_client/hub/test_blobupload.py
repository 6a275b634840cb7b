"""Sending a data blob's frames: parts read in as few calls as the spans allow, state saved once."""

from __future__ import annotations

import io
import random

from forkd_client.hub.blobupload import _coalesced, _read_spans
from forkd_client.hub.client import HubClient, RepositoryClient
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.hub.state import TransferState

from .test_push_pull import same_files


def test_parts_read_over_held_gaps_are_the_uploaded_frames_concatenated():
    rng = random.Random(7)
    blob = rng.randbytes(1 << 16)
    frames, offset = [], 0
    while offset < len(blob):  # frames of random lengths, about a third of them held (not sent)
        n = min(rng.randint(1, 900), len(blob) - offset)
        frames.append((offset, n, rng.random() > 0.33))
        offset += n
    wanted = [(start, n) for start, n, inline in frames if inline]
    spans = _coalesced(wanted)
    assert len(spans) < len(wanted)  # adjacent uploaded frames are read as one span
    assert sum(n for _, n in spans) == sum(n for _, n in wanted)
    expected = b"".join(blob[start : start + n] for start, n in wanted)
    for part in (1, 333, 4096, len(expected)):
        read = b"".join(
            _read_spans(io.BytesIO(blob), spans, at, min(part, len(expected) - at))
            for at in range(0, len(expected), part)
        )
        assert read == expected


def test_a_push_saves_an_upload_s_place_once_not_after_every_part(chain3, other_store, inproc_hub, monkeypatch):
    """The hub tells a resumed push its offset; the saved state only needs the session, so a push
    in many parts does not rewrite transfers.json after each one (it did: ~0.6 MB per part for a
    512 MiB base's recipe selection)."""
    monkeypatch.setenv("FORKD_UPLOAD_PART_BYTES", str(64 << 10))
    saves: list[str] = []
    real_set = TransferState.set

    def counting(self, key, value):
        saves.append(key.split("|", 1)[0])
        real_set(self, key, value)

    monkeypatch.setattr(TransferState, "set", counting)
    parts: list[int] = []
    started: list[str] = []
    real_upload, real_start = HubClient.upload_chunk, RepositoryClient.mount_or_start

    def counting_parts(self, location, data, offset):
        parts.append(len(data))
        return real_upload(self, location, data, offset)

    def counting_starts(self, digest):
        location = real_start(self, digest)
        if location is not None:  # None: mounted, no session
            started.append(self.name)
        return location

    monkeypatch.setattr(HubClient, "upload_chunk", counting_parts)
    monkeypatch.setattr(RepositoryClient, "mount_or_start", counting_starts)
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    ref = Reference.parse("acme/py:v1")
    pushed = push(chain3, client, "head", ref)

    data_blobs = sum(1 for link in pushed.links if link.new_chunks)
    assert len(parts) > 3 * data_blobs  # many parts per blob
    assert saves.count("recipe") == data_blobs  # one save per recipe upload: when its session opened
    assert saves.count("recipe") + saves.count("upload") == len(started)  # one per session, whatever its parts
    pull(other_store, client, ref, as_tag="py")
    same_files(chain3, "head", other_store, "py")
