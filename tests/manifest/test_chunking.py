import os

import pytest

from manifest.chunking import ChunkGeometry, chunk_spans, is_zero, iter_nonzero_chunks, validate_chunk_size
from manifest.errors import InvalidChunkSize
from manifest.fileops import CloneMethod, allocated_bytes, clone_file, data_ranges, punch_hole

from .images import write_sparse_image


@pytest.mark.parametrize("bad", [0, 1000, 2048, 3 * 4096, 32 << 20, -65536, True, 65536.0])
def test_invalid_chunk_sizes(bad):
    with pytest.raises(InvalidChunkSize, match="power of two"):
        validate_chunk_size(bad)


def test_geometry_short_last_chunk():
    g = ChunkGeometry(65536 * 3 + 5)
    assert g.count == 4
    assert [g.length(i) for i in range(4)] == [65536, 65536, 65536, 5]
    with pytest.raises(IndexError):
        g.length(4)
    assert ChunkGeometry(0).count == 0


def test_chunk_spans_merge_and_widen():
    g = ChunkGeometry(10 * 65536)
    assert chunk_spans([(100, 10), (65536 * 2 - 1, 2), (9 * 65536, 10**9)], g) == [
        (0, 3),
        (9, 10),
    ]  # adjacent spans merge
    assert chunk_spans([(0, 65536), (65536, 1)], g) == [(0, 2)]


def test_is_zero():
    assert is_zero(bytes(65536))
    assert not is_zero(bytes(65535) + b"\x01")


def test_nonzero_chunks_skip_holes_and_zero_data(tmp_path):
    cs = 65536
    path = write_sparse_image(
        tmp_path / "img",
        64 * cs + 100,
        [(3 * cs + 5, b"x"), (10 * cs, bytes(2 * cs)), (64 * cs + 50, b"tail")],
    )
    chunks = list(iter_nonzero_chunks(path, cs))
    assert [i for i, _ in chunks] == [3, 64]
    assert chunks[0][1][5:6] == b"x" and len(chunks[0][1]) == cs
    assert len(chunks[1][1]) == 100


def test_data_ranges_on_sparse_file(tmp_path):
    path = write_sparse_image(tmp_path / "img", 8 << 20, [(4 << 20, b"a" * 4096)])
    with open(path, "rb") as f:
        ranges = list(data_ranges(f.fileno()))
    assert sum(n for _, n in ranges) < (8 << 20)
    assert any(off <= (4 << 20) < off + n for off, n in ranges)


def test_clone_keeps_holes_and_bytes(tmp_path):
    src = write_sparse_image(tmp_path / "src", 32 << 20, [(1 << 20, os.urandom(1 << 20)), ((32 << 20) - 3, b"end")])
    method = clone_file(src, tmp_path / "dst")
    assert method in set(CloneMethod)
    assert (tmp_path / "dst").read_bytes() == src.read_bytes()
    assert allocated_bytes(tmp_path / "dst") < (8 << 20)
    with pytest.raises(FileExistsError):
        clone_file(src, tmp_path / "dst")


def test_punch_hole_reads_back_zero(tmp_path):
    path = write_sparse_image(tmp_path / "img", 1 << 20, [(0, b"\xff" * (1 << 20))])
    fd = os.open(path, os.O_RDWR)
    try:
        punch_hole(fd, 65536, 65536)
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert data[65536:131072] == bytes(65536)
    assert data[:65536] == b"\xff" * 65536 and data[131072:] == b"\xff" * (len(data) - 131072)
