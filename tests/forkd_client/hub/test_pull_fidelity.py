"""Chains made by ``pull`` work in forkd's own daemon, byte for byte (issue 11).

The links zero memory their parent held, grow and shrink it: forkd's spawn-time image
(tests/forkd_daemon.py) must equal each pulled link's own memory.bin.
"""

from __future__ import annotations

import os

import pytest

from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from manifest.holes import unsafe_holes

from ...forkd_daemon import ForkdDaemon, ForkdError, assert_forkd_sees_every_link
from ..snapshots import make_base_source, make_zeroing_link


def test_pulled_links_that_zero_parent_memory_assemble_right_in_forkd(store, other_store, inproc_hub, tmp_path):
    base = make_base_source(tmp_path / "src-base", seed=1)
    one = make_zeroing_link(tmp_path / "src-1", base / "memory.bin", seed=2)
    two = make_zeroing_link(tmp_path / "src-2", one / "memory.bin", seed=3)
    store.import_snapshot(base, "base")
    store.import_snapshot(one, "zero1", parent="base")
    store.import_snapshot(two, "zero2", parent="zero1")
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(store, client, "zero2", Reference.parse("acme/z:v1"))
    pull(other_store, client, Reference.parse("acme/z:v1"), as_tag="z")
    tags = [s.tag for s in other_store.chain("z")]
    assert_forkd_sees_every_link(other_store.snapshots_dir, tags, tmp_path / "work")
    for parent, child in zip(tags, tags[1:]):
        assert unsafe_holes(other_store.path(child) / "memory.bin", other_store.path(parent) / "memory.bin") == []


@pytest.mark.parametrize("factor", [2, 0.5], ids=["grow", "shrink"])
def test_pulled_links_that_resize_memory(store, other_store, inproc_hub, tmp_path, factor):
    base = make_base_source(tmp_path / "src-base", seed=1)
    size = int(os.path.getsize(base / "memory.bin") * factor)
    link = make_zeroing_link(tmp_path / "src-link", base / "memory.bin", seed=4, size=size)
    store.import_snapshot(base, "base")
    store.import_snapshot(link, "resized", parent="base")
    client = inproc_hub.client(inproc_hub.token("ci", "push:acme/*"))
    push(store, client, "resized", Reference.parse("acme/r:v1"))
    pull(other_store, client, Reference.parse("acme/r:v1"), as_tag="r")
    with pytest.raises(ForkdError, match="size mismatch"):  # forkd refuses loudly (#180), never wrong bytes
        ForkdDaemon(other_store.snapshots_dir).spawn_memory("r", tmp_path / "strict")
    assert_forkd_sees_every_link(other_store.snapshots_dir, ["r"], tmp_path / "work", resize=True)
