"""A chain pulled where the filesystem cannot reflink (ext4): each link's chunks go into its file
while the parent is copied around them, on one set of fill threads for the whole pull; the
result is byte-identical to the pushed chain there and on a reflink filesystem (XFS)."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from forkd_client.hub import fill as fill_mod
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore
from manifest import assemble as assemble_mod
from manifest.fileops import can_reflink
from tests.manifest.images import has_data

MiB = 1 << 20
CHUNK = 64 << 10
TAGS = ("base", "link1", "head")


def _push_chain(tmp_path: Path, hub) -> tuple[str, list[bytes]]:
    """A 3-link chain (8 MiB images: data, holes, links rewriting chunks in both and zeroing
    some) pushed as acme/vm:v1; returns a push token and each link's memory.bin."""
    rng = random.Random(15)
    data = bytearray(8 * MiB)
    for block in range(0, 8 * MiB, 2 * MiB):  # 1 MiB of data, then a 1 MiB hole
        data[block : block + MiB] = rng.randbytes(MiB)
    images = [bytes(data)]
    for _ in TAGS[1:]:
        for _ in range(12):
            at = rng.randrange(0, 8 * MiB // CHUNK) * CHUNK
            data[at : at + CHUNK] = rng.randbytes(CHUNK)
        at = rng.randrange(0, 4) * 2 * MiB
        data[at : at + CHUNK] = bytes(CHUNK)  # a data chunk that becomes zero
        images.append(bytes(data))
    token = hub.token("ci", "push:acme/*")
    with SnapshotStore(tmp_path / "pusher") as local:
        parent = None
        for tag, image in zip(TAGS, images, strict=True):
            src = tmp_path / "src" / tag
            src.mkdir(parents=True)
            with open(src / "memory.bin", "wb") as f:
                f.truncate(8 * MiB)
                for start in range(0, 8 * MiB, CHUNK):  # sparse where the image is zero
                    piece = image[start : start + CHUNK]
                    if has_data(piece):
                        f.seek(start)
                        f.write(piece)
            (src / "vmstate").write_bytes(tag.encode() * 100)
            local.import_snapshot(src, tag, parent=parent)
            parent = tag
        push(local, hub.client(token), "head", Reference.parse("acme/vm:v1"))
    return token, images


def _pulled(home: Path, hub, token: str) -> list[bytes]:
    with SnapshotStore(home) as store:
        pull(store, hub.client(token), Reference.parse("acme/vm:v1"), as_tag="head")
        assert not list(store.staging_root.iterdir())
        result = pull(store, hub.client(token), Reference.parse("acme/vm:v1"), as_tag="head")
        assert result.up_to_date  # every installed link checks out as pulled
        return [(store.path(tag) / "memory.bin").read_bytes() for tag in TAGS]


def test_without_reflinks_the_chain_is_byte_identical_and_its_links_never_waited_for_a_clone(
    tmp_path, inproc_hub, monkeypatch
):
    monkeypatch.setattr(assemble_mod, "can_reflink", lambda directory: False)
    token, images = _push_chain(tmp_path, inproc_hub)
    clones: list[str] = []
    real = assemble_mod.clone_file
    monkeypatch.setattr(assemble_mod, "clone_file", lambda src, dst: clones.append(str(dst)) or real(src, dst))
    assert _pulled(tmp_path / "home", inproc_hub, token) == images
    assert clones == []  # every link was copied around its chunks, none cloned before its writes


def test_on_xfs_the_chain_is_reflinked_and_byte_identical(tmp_path, inproc_hub, xfs_dir):
    assert can_reflink(xfs_dir)
    token, images = _push_chain(tmp_path, inproc_hub)
    assert _pulled(xfs_dir / "home", inproc_hub, token) == images


def test_one_set_of_fill_threads_serves_every_link_of_a_pull(tmp_path, inproc_hub, monkeypatch):
    token, images = _push_chain(tmp_path, inproc_hub)
    monkeypatch.setenv("FORKD_PULL_PARALLEL", "1")  # at most 2 piece workers
    monkeypatch.setenv("FORKD_PULL_PIECE_BYTES", str(CHUNK))  # many pieces per link
    seen: list[threading.Thread] = []  # the Thread objects themselves: idents are reused
    real = fill_mod.decompress_chunk

    def counting(*args, **kwargs):
        me = threading.current_thread()
        if not any(t is me for t in seen):
            seen.append(me)
        return real(*args, **kwargs)

    monkeypatch.setattr(fill_mod, "decompress_chunk", counting)
    assert _pulled(tmp_path / "home", inproc_hub, token) == images
    assert 1 <= len(seen) <= 2, [t.name for t in seen]  # not a new set of workers per link


@pytest.fixture(autouse=True)
def _fresh_reflink_probe(monkeypatch):
    """can_reflink caches per filesystem; each test probes anew."""
    from manifest import fileops

    monkeypatch.setattr(fileops, "_reflinks", {})
    yield
    os.sync()
