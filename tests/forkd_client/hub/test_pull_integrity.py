"""What a pull checks beyond each chunk: the whole assembled file, and the links it reuses."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest
from blake3 import blake3

from forkd_client.errors import InvalidSnapshotDir
from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import DigestInvalid, HubError, HubUnreachable
from forkd_client.hub.pull import RESUME_MARKER, pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.verified import VerifiedRecord
from manifest.chunktree import file_chunk_tree

from ..snapshots import scribble
from .hubproxy import NO_RETRY, proxy

CHUNK = 64 << 10


def _lying_push(chain3, inproc_hub, monkeypatch, liar: str):
    """Push chain3 while ``liar``'s memory.bin is claimed to have another chunk tree: a pusher whose
    chunk map disagrees with its own chunks. Our hub proves file digests at push (issue 16 item 1)
    and refuses it; a hub without that proof (older, or hostile) would serve it, so the proof is
    switched off here to give the client that hub: the client must still catch the lie."""
    from hub_server.registry.push import manifests as hub_manifests

    honest = VerifiedRecord.chunk_tree  # where a push learns every file's tree (its own pass or the record)
    lie = "blake3:" + blake3(b"not the assembled content").hexdigest()

    def tree(self, path, chunk_size, compute=file_chunk_tree):
        return lie if Path(path) == chain3.path(liar) / "memory.bin" else honest(self, path, chunk_size, compute)

    monkeypatch.setattr(VerifiedRecord, "chunk_tree", tree)
    token = inproc_hub.token("ci", "push:acme/*")
    with pytest.raises(HubError, match=r"memory\.bin declares digest .* could never be pulled"):
        push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:v1"))

    async def unproven(*args, **kwargs):
        return None

    monkeypatch.setattr(hub_manifests, "prove_file_digests", unproven)
    push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:v1"))
    monkeypatch.setattr(VerifiedRecord, "chunk_tree", honest)
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
    with pytest.raises(InvalidSnapshotDir, match=r"local snapshot 'base' .* files have changed"):
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
        pull(
            other_store,
            HubClient("http://hub.test", token, http=proxy(inproc_hub, cut), retrier=NO_RETRY),
            ref,
            as_tag="r",
        )
    again = pull(other_store, inproc_hub.client(token), ref, as_tag="r")
    base, mid, head = again.links
    assert base.reused or (base.chunks_fetched == 0 and base.chunks_resumed == 16)
    assert (mid.chunks_resumed, mid.chunks_fetched) == (4, 4)
    assert (head.chunks_resumed, head.chunks_fetched) == (0, 8)
    for link, src in zip(again.links, ["rb", "rm", "rh"], strict=True):
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


def test_a_flipped_byte_anywhere_in_a_pulled_chain_is_caught_by_the_deep_check(
    chain3, other_store, inproc_hub, monkeypatch, capsys
):
    """``inspect --verify --deep`` hashes every file again in full: a byte flipped where no stat
    fingerprint shows it (the verified-content record made to vouch for the old digest, as
    bit rot below the filesystem would) is still reported, whatever the link and offset."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from forkd_client.cli.main import main
    from forkd_client.errors import FileContentMismatch
    from forkd_client.install import settle_mtime

    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:v1"))
    pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:v1"), as_tag="py")
    links = [s.tag for s in other_store.chain("py")]
    other_store.verify_files_deep("py")  # intact

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(link=st.sampled_from(links), where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
    def flipped(link, where, bit):
        path = other_store.path(link) / "memory.bin"
        recorded = other_store.verified.digests(path, ("blake3",))
        tree = other_store.get(link).files["memory.bin"].chunk_tree  # what the pull recorded (format v2)
        assert tree is not None
        offset = int(where * path.stat().st_size)
        with open(path, "r+b") as f:
            f.seek(offset)
            byte = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([byte ^ (1 << bit)]))
        try:
            settle_mtime(path)  # an old mtime, so the record below is trusted (not racy)
            other_store.verified.record(path, recorded)  # the record now vouches for the old bytes
            other_store.verified.record_chunk_tree(path, *tree)  # and for their chunk tree
            other_store.verify_chain("py")  # the record-based check cannot see it
            with pytest.raises(FileContentMismatch) as caught:
                other_store.verify_files_deep("py")
            assert caught.value.tag == link and caught.value.role == "memory.bin"
        finally:
            with open(path, "r+b") as f:
                f.seek(offset)
                f.write(bytes([byte]))

    flipped()
    # and through the CLI, once, in the head (whose sha256 no child's parent_content_hash checks)
    path = other_store.path(links[-1]) / "memory.bin"
    recorded = other_store.verified.digests(path, ("blake3",))
    with open(path, "r+b") as f:
        f.seek(4096)
        byte = f.read(1)[0]
        f.seek(4096)
        f.write(bytes([byte ^ 1]))
    settle_mtime(path)
    other_store.verified.record(path, recorded)
    monkeypatch.setenv("FORKD_HOME", str(other_store.root))
    assert main(["inspect", "py", "--verify"]) == 0
    capsys.readouterr()
    assert main(["inspect", "py", "--verify", "--deep"]) == 6  # verification
    assert f"snapshot {links[-1]!r}: memory.bin hashes to" in capsys.readouterr().err
