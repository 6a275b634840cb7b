"""On XFS, pulled chain links share the parent's extents: a link costs its changed chunks on disk."""

from __future__ import annotations

import os

from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore

MiB = 1 << 20


def used_bytes(path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def test_pulled_links_are_reflinked_on_xfs(tmp_path, inproc_hub, xfs_dir):
    src = tmp_path / "src"
    with SnapshotStore(tmp_path / "home") as local:
        base = src / "base"
        base.mkdir(parents=True)
        with open(base / "memory.bin", "wb") as f:
            f.truncate(64 * MiB)
            f.write(os.urandom(32 * MiB))
        (base / "vmstate").write_bytes(b"v0" * 100)
        link = src / "link"
        link.mkdir()
        data = bytearray((base / "memory.bin").read_bytes())
        data[MiB : 2 * MiB] = os.urandom(MiB)
        (link / "memory.bin").write_bytes(bytes(data))
        (link / "vmstate").write_bytes(b"v1" * 100)
        local.import_snapshot(base, "base")
        local.import_snapshot(link, "link", parent="base")
        token = inproc_hub.token("ci", "push:acme/*")
        push(local, inproc_hub.client(token), "link", Reference.parse("acme/vm:v1"))

    with SnapshotStore(xfs_dir / "home") as store:
        store.staging_root.mkdir(parents=True)  # create the store layout before measuring
        before = used_bytes(xfs_dir)
        pull(store, inproc_hub.client(token), Reference.parse("acme/vm:v1"), as_tag="link")
        os.sync()  # let XFS settle delayed allocation before measuring
        after = used_bytes(xfs_dir)
        assert (store.path("link") / "memory.bin").read_bytes() == bytes(data)
        new_data = after - before
        # the base image costs 32 MiB and the link only its 1 MiB change (one full image per link
        # would need 64 MiB); nothing is left in staging.
        assert not list(store.staging_root.iterdir())
        assert new_data < 32 * MiB + 8 * MiB, new_data
