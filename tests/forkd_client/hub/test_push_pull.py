"""Push a local chain to a real (in-process) hub and pull it back into another store."""

from __future__ import annotations

import itertools
import os

import pytest

from forkd_client import verified as verified_mod
from forkd_client.hub.errors import DigestInvalid, Forbidden, NotFound, Unauthorized
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore
from manifest import assemble as assemble_mod
from manifest import chunktree as chunktree_mod
from manifest.chunktree import file_chunk_tree

from ..snapshots import make_link_source, sha256_hex

ROLES = ("memory.bin", "vmstate")


def same_files(a: SnapshotStore, tag_a: str, b: SnapshotStore, tag_b: str) -> None:
    for role in ROLES:
        assert (a.path(tag_a) / role).read_bytes() == (b.path(tag_b) / role).read_bytes(), role


def test_push_then_pull_a_three_link_chain(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    client = inproc_hub.client(token)
    ref = Reference.parse("acme/py:v1")
    pushed = push(chain3, client, "head", ref)
    assert [link.tag for link in pushed.links] == ["base", "mid", "head"]
    assert not any(link.skipped for link in pushed.links)
    # links upload far less than their logical size: only changed chunks travel
    mem = os.path.getsize(chain3.path("head") / "memory.bin")
    assert pushed.links[2].bytes_uploaded < mem / 4

    pulled = pull(other_store, inproc_hub.client(token), ref, as_tag="py")
    assert pulled.digest == pushed.digest
    chain = other_store.chain("py")
    assert len(chain) == 3
    for src, dst in zip(["base", "mid", "head"], [s.tag for s in chain], strict=True):
        same_files(chain3, src, other_store, dst)
    # each link records the chunk tree of the parent it was assembled on (format v2: proven by
    # construction, no whole-file hash), which is the tree of the parent's bytes, and forkd's sha256
    for parent, child in itertools.pairwise(chain):
        assert child.parent_tree == parent.files["memory.bin"].chunk_tree is not None
        size, tree = child.parent_tree
        assert tree == file_chunk_tree(other_store.path(parent.tag) / "memory.bin", size)
        assert child.parent_content_hash == sha256_hex(other_store.path(parent.tag) / "memory.bin")
    other_store.verify_chain("py", forkd_hashes=True)  # forkd's own check at spawn holds

    again = pull(other_store, inproc_hub.client(token), ref, as_tag="py")
    assert again.up_to_date and again.bytes_received < 100_000


def test_forking_a_pulled_chain_hashes_nothing(chain3, other_store, inproc_hub, monkeypatch):
    """The pull verified every file (blake3, recorded): the chain check before a fork reads none."""
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    ref = Reference.parse("acme/py:v1")
    push(chain3, client, "head", ref)
    pull(other_store, client, ref, as_tag="py")

    def no_hashing(*args, **kwargs):
        raise AssertionError("a verified file was hashed again")

    monkeypatch.setattr(verified_mod, "digest_file", no_hashing)
    monkeypatch.setattr(chunktree_mod, "chunk_list_of_file", no_hashing)  # nor its chunk tree read again
    assert len(other_store.verify_chain("py")) == 3


def test_a_v2_pull_reads_no_assembled_memory_image_back(chain3, other_store, inproc_hub, monkeypatch):
    """Format v2: each memory.bin is proven by its chunk tree (every new chunk verified on arrival,
    the rest the verified parent's), so no whole-file hash runs on the pull's critical path; the
    tree is recorded, and a pull of the same chain again reads nothing to know it is intact."""
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    ref = Reference.parse("acme/py:v1")
    push(chain3, client, "head", ref)
    hashed: list[str] = []
    real_digest_file = assemble_mod.digest_file

    def recording(path, *args, **kwargs):
        hashed.append(os.path.basename(path))
        return real_digest_file(path, *args, **kwargs)

    monkeypatch.setattr(assemble_mod, "digest_file", recording)
    monkeypatch.setattr(verified_mod, "digest_file", recording)
    monkeypatch.setattr(chunktree_mod, "chunk_list_of_file", lambda *a: hashed.append("chunk list") or None)
    pulled = pull(other_store, client, ref, as_tag="py")
    assert "memory.bin" not in hashed and "chunk list" not in hashed
    for link in pulled.links:
        path = other_store.path(link.tag) / "memory.bin"
        recorded = other_store.get(link.tag).files["memory.bin"].chunk_tree
        assert recorded is not None and other_store.verified.cached_tree(path) == recorded
    assert pull(other_store, client, ref, as_tag="py").up_to_date
    assert hashed == []


def test_second_push_of_the_same_chain_uploads_nothing(chain3, inproc_hub):
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    ref = Reference.parse("acme/py:v1")
    push(chain3, client, "head", ref)
    again = push(chain3, client, "head", ref.with_tag("v2"))
    assert all(link.skipped for link in again.links)
    assert again.bytes_sent < 10_000


def test_pushing_a_new_child_sends_about_its_changed_chunks(chain3, inproc_hub, tmp_path):
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(chain3, client, "head", Reference.parse("acme/py:v1"))
    src = make_link_source(tmp_path / "src-new", chain3.path("head") / "memory.bin", seed=9)
    chain3.import_snapshot(src, "newer", parent="head")
    result = push(chain3, client, "newer", Reference.parse("acme/py:v2"))
    new = result.links[-1]
    assert [link.skipped for link in result.links] == [True, True, True, False]
    # bytes on the wire for the new link ≈ its changed chunks (zstd may only make it smaller)
    assert new.bytes_uploaded <= new.changed_bytes + 64 * 1024
    assert result.bytes_sent < new.changed_bytes + 256 * 1024


def test_pull_with_parent_present_downloads_only_the_child(chain3, other_store, inproc_hub, tmp_path):
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "mid", Reference.parse("acme/py:mid"))
    first = pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:mid"), as_tag="mid")
    push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:head"))
    second = pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:head"), as_tag="head")
    assert [link.reused for link in second.links] == [True, True, False]
    assert second.links[-1].bytes_fetched < first.links[0].bytes_fetched
    same_files(chain3, "head", other_store, "head")


def test_auth_errors_are_typed(chain3, other_store, inproc_hub):
    ref = Reference.parse("acme/private:v1")
    with pytest.raises(Unauthorized):
        push(chain3, inproc_hub.client(None), "base", ref)
    with pytest.raises(Forbidden):
        push(chain3, inproc_hub.client(inproc_hub.token("reader", "pull:acme/*")), "base", ref)
    push(chain3, inproc_hub.client(inproc_hub.token("ci", "push:acme/*")), "base", ref)
    with pytest.raises(Unauthorized):  # anonymous: told to authenticate, whether it exists or not
        pull(other_store, inproc_hub.client(None), ref)
    with pytest.raises(NotFound):  # a token without pull: exactly like a missing repository
        pull(other_store, inproc_hub.client(inproc_hub.token("stranger", "pull:other/*")), ref)
    with pytest.raises(Unauthorized):
        pull(other_store, inproc_hub.client("fkd_not-a-real-token"), ref)


def test_corrupted_chunk_on_the_hub_is_named_and_nothing_installed(chain3, other_store, inproc_hub, tmp_path):
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "base", Reference.parse("acme/py:v1"))
    # format v2: the base's data blob is stored as a recipe over frames, in one pack
    (data_blob,) = [p for p in (tmp_path / "hub" / "blobs" / "packs").rglob("*") if p.is_file()]
    raw = bytearray(data_blob.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data_blob.write_bytes(bytes(raw))
    with pytest.raises(DigestInvalid, match=r"memory\.bin chunk \d+"):
        pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:v1"), as_tag="py")
    assert other_store.tags() == []


def test_chunks_found_in_local_snapshots_at_other_offsets_are_not_downloaded(tmp_path, store, other_store, inproc_hub):
    """KASLR moves pages between boots: a second base sharing content at shifted offsets is read locally."""
    from ..snapshots import make_base_source

    first = make_base_source(tmp_path / "first", seed=5)
    shifted = tmp_path / "shifted"
    shifted.mkdir()
    memory = (first / "memory.bin").read_bytes()
    (shifted / "memory.bin").write_bytes(bytes(65536) + memory[:-65536])  # same chunks, one chunk later
    (shifted / "vmstate").write_bytes(b"other vmstate")
    store.import_snapshot(first, "first")
    store.import_snapshot(shifted, "shifted")
    token = inproc_hub.token("ci", "push:acme/*")
    push(store, inproc_hub.client(token), "first", Reference.parse("acme/one:v1"))
    push(store, inproc_hub.client(token), "shifted", Reference.parse("acme/two:v1"))

    one = pull(other_store, inproc_hub.client(token), Reference.parse("acme/one:v1"), as_tag="one")
    two = pull(other_store, inproc_hub.client(token), Reference.parse("acme/two:v1"), as_tag="two")
    assert one.links[0].chunks_fetched > 0
    assert two.links[0].chunks_local >= one.links[0].chunks_fetched - 1
    assert two.links[0].bytes_fetched < one.links[0].bytes_fetched / 4
    assert (other_store.path("two") / "memory.bin").read_bytes() == (shifted / "memory.bin").read_bytes()


def test_a_child_that_changed_3_percent_of_memory_uploads_about_3_percent(tmp_path, store, inproc_hub):
    import random

    MiB = 1 << 20
    rng = random.Random(7)
    base = tmp_path / "b"
    base.mkdir()
    memory = bytearray(rng.randbytes(32 * MiB))  # fully used, incompressible guest memory
    (base / "memory.bin").write_bytes(memory)
    (base / "vmstate").write_bytes(b"v0")
    chunks = 32 * MiB // 65536
    for index in rng.sample(range(chunks), chunks * 3 // 100):  # dirty 3% of the 64 KiB chunks
        offset = index * 65536 + rng.randrange(0, 65536 - 4096)
        memory[offset : offset + 4096] = rng.randbytes(4096)
    child = tmp_path / "c"
    child.mkdir()
    (child / "memory.bin").write_bytes(memory)
    (child / "vmstate").write_bytes(b"v1")
    store.import_snapshot(base, "base")
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(store, client, "base", Reference.parse("acme/vm:base"))
    store.import_snapshot(child, "child", parent="base")
    result = push(store, client, "child", Reference.parse("acme/vm:child"))
    changed = (chunks * 3 // 100) * 65536
    assert result.links[-1].changed_bytes == changed
    assert 0.9 * changed <= result.bytes_sent <= 1.1 * changed + 64 * 1024, (result.bytes_sent, changed)


def test_pushing_a_pulled_chain_back_to_its_hub_costs_head_requests_only(chain3, other_store, inproc_hub):
    token = inproc_hub.token("ci", "push:acme/*")
    push(chain3, inproc_hub.client(token), "head", Reference.parse("acme/py:v1"))
    pull(other_store, inproc_hub.client(token), Reference.parse("acme/py:v1"), as_tag="py")
    again = push(other_store, inproc_hub.client(token), "py", Reference.parse("acme/py:v2"))
    assert all(link.skipped for link in again.links)
    assert again.bytes_sent < 10_000


@pytest.mark.integration  # mounts a tiny tmpfs (tests/tiers.py)
def test_a_pull_that_cannot_fit_is_refused_before_writing(store, inproc_hub, tmp_path):
    """A real, tiny filesystem (tmpfs, root only): the pull says how much it needs and writes nothing."""
    import os as _os
    import subprocess

    from forkd_client.hub.errors import DiskFull

    if _os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("tmpfs mount not allowed here")
    try:
        src = tmp_path / "src"
        src.mkdir()
        (src / "memory.bin").write_bytes(_os.urandom(4 << 20))  # 4 MiB of data: cannot fit in 1 MiB
        (src / "vmstate").write_bytes(b"v")
        store.import_snapshot(src, "base")
        token = inproc_hub.token("ci", "push:acme/*")
        push(store, inproc_hub.client(token), "base", Reference.parse("acme/py:v1"))
        with SnapshotStore(mnt / "home") as small:
            with pytest.raises(DiskFull, match=r"no space left on .* for layer") as info:
                pull(small, inproc_hub.client(token), Reference.parse("acme/py:v1"), as_tag="py")
            assert isinstance(info.value, OSError)
            assert small.tags() == []
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def test_a_links_data_is_fetched_while_its_parent_is_still_being_cloned(chain3, other_store, inproc_hub, monkeypatch):
    """The parent clone is off the critical path: each link's first data range is asked for while
    the clone of its parent's file is still running (the clone is held until one arrives)."""
    import threading

    import httpx

    from forkd_client.hub.client import HubClient

    from .hubproxy import proxy

    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/py:v1")
    push(chain3, inproc_hub.client(token), "head", ref)
    ranges: list[str] = []
    arrived = threading.Condition()

    def count(request: httpx.Request) -> None:
        if "range" in request.headers:
            with arrived:
                ranges.append(request.headers["range"])
                arrived.notify_all()

    real_clone = assemble_mod.clone_file
    overlapped: list[bool] = []

    def held_clone(src, dst):
        with arrived:
            before = len(ranges)
            # a deadlock guard, not a timing assertion: without the overlap no range can arrive
            overlapped.append(arrived.wait_for(lambda: len(ranges) > before, timeout=10))
        return real_clone(src, dst)

    monkeypatch.setattr(assemble_mod, "clone_file", held_clone)
    # the clone path (a reflink filesystem); without reflinks nothing is cloned before the writes
    # at all (test_pull_without_reflink.py)
    monkeypatch.setattr(assemble_mod, "can_reflink", lambda directory: True)
    client = HubClient("http://hub.test", token, http=proxy(inproc_hub, count))
    pull(other_store, client, ref, as_tag="py")
    assert overlapped == [True, True]  # mid's clone of base, head's clone of mid
    for src, dst in zip(["base", "mid", "head"], [s.tag for s in other_store.chain("py")], strict=True):
        same_files(chain3, src, other_store, dst)


def test_the_install_does_not_fsync_again_what_the_verifier_made_durable(chain3, other_store, inproc_hub, monkeypatch):
    """Each pulled file is fsynced once, by the verifier after its check; the install then
    fsyncs only the metadata and the directories."""
    from forkd_client import install as install_mod

    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    ref = Reference.parse("acme/py:v1")
    push(chain3, client, "head", ref)
    synced: list[str] = []
    real_fsync_path = install_mod.fsync_path

    def recording(path):
        synced.append(os.path.basename(path))
        real_fsync_path(path)

    monkeypatch.setattr(install_mod, "fsync_path", recording)
    pull(other_store, client, ref, as_tag="py")
    assert synced  # the directories still are
    assert not {"memory.bin", "vmstate"} & set(synced)
    other_store.verify_chain("py", forkd_hashes=True)


def test_inspect_shows_the_chunk_tree_a_v2_pull_recorded(chain3, other_store, inproc_hub, monkeypatch, capsys):
    from forkd_client.cli.main import main

    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    ref = Reference.parse("acme/py:v1")
    push(chain3, client, "head", ref)
    pull(other_store, client, ref, as_tag="py")
    _, tree = other_store.get("py").files["memory.bin"].chunk_tree
    monkeypatch.setenv("FORKD_HOME", str(other_store.root))
    capsys.readouterr()
    assert main(["inspect", "py"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("memory.bin"))
    assert f"tree {tree}" in row


def test_a_push_reads_each_new_file_once_for_its_layer_and_its_chunk_tree(chain3, other_store, inproc_hub, monkeypatch):
    """The diff that finds a link's changes also gives the file's chunk tree (recorded after): no
    second pass over memory.bin for it, and the tree the layer declares is the file's own."""
    head_memory = chain3.path("head") / "memory.bin"
    assert chain3.verified.cached_tree(head_memory) is None  # nothing recorded it before the push
    real = chunktree_mod.chunk_list_of_file

    def no_second_pass(*args, **kwargs):
        raise AssertionError("a pushed file was read again for its chunk tree")

    monkeypatch.setattr(chunktree_mod, "chunk_list_of_file", no_second_pass)
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    ref = Reference.parse("acme/py:v1")
    push(chain3, client, "head", ref)
    monkeypatch.setattr(chunktree_mod, "chunk_list_of_file", real)

    for tag in ("base", "mid", "head"):
        memory = chain3.path(tag) / "memory.bin"
        size, tree = chain3.verified.cached_tree(memory)
        assert tree == file_chunk_tree(memory, size)
    pull(other_store, client, ref, as_tag="py")  # the pull proves each file by the declared trees
    same_files(chain3, "head", other_store, "py")
