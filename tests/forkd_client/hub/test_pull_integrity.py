"""What a pull checks beyond each chunk: the whole assembled file, and the links it reuses."""

from __future__ import annotations

import pytest
from blake3 import blake3

from forkd_client.errors import InvalidSnapshotDir
from forkd_client.hub.errors import DigestInvalid
from forkd_client.hub.pull import RESUME_MARKER, pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference

from ..snapshots import scribble


def _lying_push(chain3, inproc_hub, monkeypatch, liar: str):
    """Push chain3 while ``liar``'s memory.bin is claimed to have another blake3: a pusher whose
    chunk map disagrees with its own chunks. The hub cannot tell (it never assembles files)."""
    record = chain3.verified
    honest = record.digests
    lie = "blake3:" + blake3(b"not the assembled content").hexdigest()

    def digests(path, algorithms=("blake3",)):
        found = honest(path, algorithms)
        if path == chain3.path(liar) / "memory.bin" and "blake3" in found:
            found = {**found, "blake3": lie}
        return found

    monkeypatch.setattr(record, "digests", digests)
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:v1"))
    monkeypatch.setattr(record, "digests", honest)
    return token, lie


def test_an_assembled_file_that_does_not_hash_to_its_digest_is_refused(chain3, other_store, inproc_hub, monkeypatch):
    token, lie = _lying_push(chain3, inproc_hub, monkeypatch, liar="mid")
    with pytest.raises(DigestInvalid) as info:
        pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:v1"), as_tag="py")
    message = str(info.value)
    assert "memory.bin" in message and lie in message and "(mid)" in message
    assert other_store.tags() == ["base"]  # the base checked out; nothing built on the lie is installed
    # neither the failed link nor the ones built on it will be resumed from
    assert not list(other_store.staging_root.glob(f"resume-pull-*/{RESUME_MARKER}"))


def test_a_reused_link_whose_files_changed_is_not_built_upon(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    pull(other_store, inproc_hub.client(token), ref, as_tag="py")
    scribble(other_store.path("base") / "memory.bin")
    with pytest.raises(InvalidSnapshotDir, match="local snapshot 'base' .* files have changed"):
        pull(other_store, inproc_hub.client(token), ref, as_tag="py")
    again = pull(other_store, inproc_hub.client(token), ref, as_tag="py", force=True)
    assert [link.reused for link in again.links] == [False, True, True]
    assert (other_store.path("base") / "memory.bin").read_bytes() == (chain3.path("base") / "memory.bin").read_bytes()
    assert len(other_store.verify_chain("py")) == 3
