"""What a pull checks beyond each chunk: the whole assembled file, and the links it reuses."""

from __future__ import annotations

import random

import httpx
import pytest
from blake3 import blake3

from forkd_client.errors import InvalidSnapshotDir
from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import DigestInvalid, HubUnreachable
from forkd_client.hub.pull import RESUME_MARKER, pull
from forkd_client.hub import push as push_module
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference

from ..snapshots import scribble
from .hubproxy import proxy

CHUNK = 64 << 10


def _lying_push(chain3, inproc_hub, monkeypatch, liar: str):
    """Push chain3 while ``liar``'s memory.bin is claimed to have another chunk tree: a pusher whose
    chunk map disagrees with its own chunks. The hub cannot tell (it never assembles files)."""
    honest = push_module.file_chunk_tree
    lie = "blake3:" + blake3(b"not the assembled content").hexdigest()

    def tree(path, chunk_size):
        return lie if path == chain3.path(liar) / "memory.bin" else honest(path, chunk_size)

    monkeypatch.setattr(push_module, "file_chunk_tree", tree)
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:v1"))
    monkeypatch.setattr(push_module, "file_chunk_tree", honest)
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


def _random_chain(store, root) -> None:
    """rb <- rm <- rh: a 1 MiB incompressible base (16 chunks) and links rewriting 8 chunks each,
    so every frame is ~64 KiB and each range request carries one."""
    rng = random.Random(11)
    data = bytearray(rng.randbytes(1 << 20))
    parent = None
    for tag in ("rb", "rm", "rh"):
        if parent is not None:
            for index in rng.sample(range(16), 8):
                data[index * CHUNK : (index + 1) * CHUNK] = rng.randbytes(CHUNK)
        src = root / f"src-{tag}"
        src.mkdir()
        (src / "memory.bin").write_bytes(bytes(data))
        (src / "vmstate").write_bytes(tag.encode() * 100)
        store.import_snapshot(src, tag, parent=parent)
        parent = tag


def test_a_chain_pull_cut_off_midway_resumes_where_it_stopped(store, other_store, inproc_hub, monkeypatch, tmp_path):
    """The connection drops half-way through the middle link's frames (the base is then installed
    or still being checked): the next pull fetches only what had not been written yet."""
    _random_chain(store, tmp_path)
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/rnd:v1")
    push(store, inproc_hub.client(token), "rh", ref)
    monkeypatch.setenv("FORKD_PULL_PARALLEL", "1")
    monkeypatch.setenv("FORKD_PULL_RANGE_BYTES", str(CHUNK))
    ranges: list[str] = []

    def cut(request: httpx.Request) -> httpx.Response | None:
        if "range" in request.headers:
            ranges.append(request.headers["range"])
            if len(ranges) > 16 + 4:  # the base's 16 frames, then 4 of the middle link's 8
                raise httpx.ConnectError("connection reset", request=request)
        return None

    with pytest.raises(HubUnreachable):
        pull(other_store, HubClient("http://hub.test", token, http=proxy(inproc_hub, cut)), ref, as_tag="r")
    again = pull(other_store, inproc_hub.client(token), ref, as_tag="r")
    base, mid, head = again.links
    assert base.reused or (base.chunks_fetched == 0 and base.chunks_resumed == 16)
    assert (mid.chunks_resumed, mid.chunks_fetched) == (4, 4)
    assert (head.chunks_resumed, head.chunks_fetched) == (0, 8)
    for link, src in zip(again.links, ["rb", "rm", "rh"]):
        assert (other_store.path(link.tag) / "memory.bin").read_bytes() == (store.path(src) / "memory.bin").read_bytes()


def test_two_pulls_racing_for_the_same_chain_both_succeed(chain3, other_store, inproc_hub, monkeypatch):
    """Another process installs the same layers while this pull is about to: it keeps theirs."""
    from forkd_client.store import SnapshotStore

    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    commit = other_store.commit
    raced: list[bool] = []

    def commit_after_a_rival(items, force=False):
        if not raced:  # just before our first install, a second process pulls the whole chain
            raced.append(True)
            with SnapshotStore(other_store.root) as rival:
                pull(rival, inproc_hub.client(token), ref, as_tag="py")
        return commit(items, force=force)

    monkeypatch.setattr(other_store, "commit", commit_after_a_rival)
    result = pull(other_store, inproc_hub.client(token), ref, as_tag="py")
    assert raced and result.tag == "py"
    assert [s.tag for s in other_store.verify_chain("py")] == [link.tag for link in result.links]
    assert (other_store.path("py") / "memory.bin").read_bytes() == (chain3.path("head") / "memory.bin").read_bytes()
    assert not list(other_store.staging_root.iterdir())  # our copies were dropped
