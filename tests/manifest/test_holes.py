"""The hole rule: a link's hole may stand only where its parent is zero too."""

from __future__ import annotations

import os
from pathlib import Path

from manifest.holes import PAGE, fill_unsafe_holes, hole_ranges, unsafe_holes

from ..forkd_daemon import ForkdDaemon
from .layers import assemble, build_layer


def sparse(path: Path, size: int, extents: dict[int, bytes]) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in extents.items():
            f.seek(offset)
            f.write(data)
    return path


def forkd_apply(parent: Path, link: Path, out: Path) -> bytes:
    out.write_bytes(parent.read_bytes())
    ForkdDaemon.apply_diff(link, out)
    return out.read_bytes()


def test_unsafe_holes_are_exactly_where_the_parent_holds_data(tmp_path):
    parent = sparse(tmp_path / "p", 64 * PAGE, {0: b"\x01" * 4 * PAGE, 20 * PAGE: bytes(2 * PAGE) + b"\x02" * PAGE})
    link = sparse(tmp_path / "l", 64 * PAGE, {2 * PAGE: b"\x03" * PAGE, 40 * PAGE: b"\x04" * PAGE})
    # link holes: [0,2) [3,40) [41,64) pages; parent non-zero: [0,4) and page 22 (its zero pages are data, not holes)
    assert unsafe_holes(link, parent) == [(0, 2 * PAGE), (3 * PAGE, PAGE), (22 * PAGE, PAGE)]
    assert forkd_apply(parent, link, tmp_path / "wrong") != link.read_bytes()

    content = link.read_bytes()
    assert fill_unsafe_holes(link, parent) == 4 * PAGE
    assert link.read_bytes() == content  # the content never changes
    assert unsafe_holes(link, parent) == []
    assert forkd_apply(parent, link, tmp_path / "right") == content
    with open(link, "rb") as f:  # holes over the parent's zeros are kept
        assert (23 * PAGE, 17 * PAGE) in list(hole_ranges(f.fileno()))
    assert fill_unsafe_holes(link, parent) == 0


def test_past_the_parents_end_holes_are_safe(tmp_path):
    parent = sparse(tmp_path / "p", 4 * PAGE, {0: b"\x01" * 4 * PAGE})
    link = sparse(tmp_path / "l", 16 * PAGE, {0: b"\x01" * 4 * PAGE})
    assert unsafe_holes(link, parent) == []


def test_assembled_link_writes_real_zeros_where_the_parent_had_data(tmp_path):
    """A layer whose chunk became all zeros: assembly writes zeros, forkd keeps them."""
    cs = 64 << 10
    parent = sparse(tmp_path / "parent", 8 * cs, {0: os.urandom(8 * cs)})
    child = sparse(
        tmp_path / "child", 8 * cs, {0: parent.read_bytes()[: 3 * cs], 4 * cs: parent.read_bytes()[4 * cs :]}
    )
    chunk_map, _, _ = build_layer(parent, child, tmp_path / "blobs", cs)
    assert any(e.is_zero for e in chunk_map.entries)
    out = assemble(chunk_map, parent, tmp_path / "out", tmp_path / "blobs")
    assert out.path.read_bytes() == child.read_bytes()
    assert unsafe_holes(out.path, parent) == []
    assert forkd_apply(parent, out.path, tmp_path / "forkd") == child.read_bytes()
