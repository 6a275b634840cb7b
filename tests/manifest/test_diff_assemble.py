"""assemble(parent, diff(parent, child)) == child, byte for byte, for random sparse images and chains."""

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manifest.chunktree import ChunkList, apply_map, chunk_list_of_file, file_chunk_tree
from manifest.diff import diff_files
from manifest.digest import digest_bytes, digest_file
from manifest.errors import AssemblyError, DigestMismatch
from manifest.fileops import allocated_bytes
from manifest.holes import unsafe_holes

from .images import mutate_image, random_image, same_bytes, write_sparse_image
from .layers import assemble, build_layer

SIZES = st.integers(min_value=0, max_value=3 << 20)
CHUNK_SIZES = st.sampled_from([4096, 16384, 65536, 1 << 20])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), size=SIZES, new_size=SIZES, chunk_size=CHUNK_SIZES)
def test_assemble_of_diff_equals_child(tmp_path_factory, seed, size, new_size, chunk_size):
    tmp = tmp_path_factory.mktemp("prop")
    rng = random.Random(seed)
    parent = random_image(tmp / "parent", rng, size)
    child = mutate_image(parent, tmp / "child", rng, new_size=new_size)
    for base in (None, parent):
        chunk_map, _, _ = build_layer(base, child, tmp / "blobs", chunk_size)
        out = tmp / f"out-{base is None}"
        result = assemble(chunk_map, base, out, tmp / "blobs")
        assert same_bytes(out, child)
        # the chunk tree of the assembled bytes, and the one derived in O(chunks) from the
        # parent's chunk list and the map, are both the digest the layer declares
        assert file_chunk_tree(out, chunk_size) == chunk_map.digest
        derived = (chunk_list_of_file(base, chunk_size) if base else ChunkList(0, chunk_size)).resized(chunk_map.size)
        derived.apply((e.index, e.digest) for e in chunk_map.entries)
        assert derived.digest() == chunk_map.digest
        assert result.digests["blake3"] == str(digest_file(child)["blake3"])
        if base is not None:  # forkd's daemon reads a link's holes as the parent's bytes
            assert unsafe_holes(out, base) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), size=SIZES, new_size=SIZES, chunk_size=CHUNK_SIZES)
def test_the_diff_pass_yields_the_childs_chunk_list(tmp_path_factory, seed, size, new_size, chunk_size):
    """One read gives both the changes and the child's chunk tree (a push does not read the file
    twice): the list the diff fills is the file's own, whatever changed, grew, shrank or zeroed."""
    tmp = tmp_path_factory.mktemp("onepass")
    rng = random.Random(seed)
    parent = random_image(tmp / "parent", rng, size)
    child = mutate_image(parent, tmp / "child", rng, new_size=new_size)
    for base in (None, parent):
        filled = ChunkList(os.path.getsize(child), chunk_size)
        with_list = list(diff_files(base, child, chunk_size, chunk_list=filled))
        assert filled.digest() == file_chunk_tree(child, chunk_size)
        assert with_list == list(diff_files(base, child, chunk_size))  # the changes are the same


def test_the_diff_refuses_a_chunk_list_of_another_geometry(tmp_path):
    image = tmp_path / "img"
    write_sparse_image(image, 3 * 4096, [(0, b"a" * 4096)])
    for wrong in (ChunkList(2 * 4096, 4096), ChunkList(3 * 4096, 8192)):
        with pytest.raises(ValueError, match="chunk list"):
            list(diff_files(None, image, 4096, chunk_list=wrong))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), depth=st.integers(1, 5))
def test_chains_of_depth_1_to_5_assemble(tmp_path_factory, seed, depth):
    tmp = tmp_path_factory.mktemp("chain")
    rng = random.Random(seed)
    size = rng.randrange(1, 2 << 20)
    images = [random_image(tmp / "img0", rng, size)]
    for i in range(1, depth):
        images.append(
            mutate_image(images[-1], tmp / f"img{i}", rng, new_size=rng.choice([None, size + rng.randrange(0, 70000)]))
        )
    assembled = None
    listed = None  # the chunk list a puller derives from the maps alone, link by link, in O(chunks)
    for i, image in enumerate(images):
        chunk_map, _, _ = build_layer(images[i - 1] if i else None, image, tmp / "blobs")
        out = tmp / f"asm{i}"
        assemble(chunk_map, assembled, out, tmp / "blobs")
        assert same_bytes(out, image), f"link {i} of {depth}"
        listed = apply_map(
            listed, ((e.index, e.digest) for e in chunk_map.entries), chunk_map.size, chunk_map.chunk_size
        )
        assert listed.digest() == chunk_map.digest == file_chunk_tree(out, chunk_map.chunk_size), f"link {i}"
        assembled = out


def test_child_layer_holds_only_changed_chunks(tmp_path):
    cs = 65536
    base = write_sparse_image(tmp_path / "base", 256 * cs, [(0, os.urandom(100 * cs))])
    child = mutate_image(base, tmp_path / "child", random.Random(1), n_writes=0)
    with open(child, "r+b") as f:
        for index in (3, 50, 200):
            f.seek(index * cs + 10)
            f.write(b"changed")
        f.seek(7 * cs)
        f.write(bytes(cs))  # became zero
    chunk_map, blobs, stats = build_layer(base, child, tmp_path / "blobs")
    assert [(e.index, e.is_zero) for e in chunk_map.entries] == [(3, False), (7, True), (50, False), (200, False)]
    assert stats.new_chunks == 3 and stats.zero_chunks == 1
    assert sum(b.size for b in blobs) < 4 * cs
    out = tmp_path / "out"
    assemble(chunk_map, base, out, tmp_path / "blobs")
    assert same_bytes(out, child)


def test_zero_chunks_are_holes_and_never_stored(tmp_path):
    cs = 65536
    image = write_sparse_image(tmp_path / "img", 1024 * cs, [(5 * cs, b"data"), (9 * cs, bytes(50 * cs))])
    chunk_map, _blobs, _stats = build_layer(None, image, tmp_path / "blobs")
    assert [e.index for e in chunk_map.entries] == [5]
    out = tmp_path / "out"
    assemble(chunk_map, None, out, tmp_path / "blobs")
    assert allocated_bytes(out) <= 4 * cs
    assert same_bytes(out, image)


def test_identical_chunks_at_any_offset_are_stored_once(tmp_path):
    cs = 65536
    page = os.urandom(cs)
    image = write_sparse_image(tmp_path / "img", 64 * cs, [(i * cs, page) for i in (1, 17, 40)])
    chunk_map, _blobs, stats = build_layer(None, image, tmp_path / "blobs")
    assert stats.new_chunks == 1 and stats.reused_chunks == 2
    assert len({(e.blob, e.offset) for e in chunk_map.entries}) == 1


def test_a_layer_is_a_pure_function_of_its_chunks(tmp_path):
    """Format v2: the same file gives byte-identical chunk maps and data blobs, named by sha256,
    whatever else exists; each blob lists its frames with their blake3 and chunk digests."""
    cs = 65536
    a = write_sparse_image(tmp_path / "a", 16 * cs, [(0, os.urandom(4 * cs)), (9 * cs, b"x" * cs)])
    map_1, blobs_1, _ = build_layer(None, a, tmp_path / "one")
    map_2, blobs_2, _ = build_layer(
        None,
        a,
        tmp_path / "two",
    )
    assert map_1.to_json() == map_2.to_json()
    assert [b.path.read_bytes() for b in blobs_1] == [b.path.read_bytes() for b in blobs_2]
    blob = blobs_1[0]
    assert blob.digest == str(digest_bytes(blob.path.read_bytes(), "sha256"))
    data = blob.path.read_bytes()
    assert [f.chunk for f in blob.frames] == [e.digest for e in map_1.entries]
    for f in blob.frames:
        assert f.digest == str(digest_bytes(data[f.offset : f.offset + f.length]))
    assert sum(f.length for f in blob.frames) == blob.size


def test_corrupted_frame_is_named_and_nothing_left(tmp_path):
    cs = 65536
    image = write_sparse_image(tmp_path / "img", 8 * cs, [(2 * cs, os.urandom(cs)), (5 * cs, os.urandom(cs))])
    chunk_map, blobs, _ = build_layer(None, image, tmp_path / "blobs")
    raw = bytearray(blobs[0].path.read_bytes())
    raw[-100] ^= 0xFF  # inside the last frame's raw block: decodes, but to other bytes
    blobs[0].path.write_bytes(bytes(raw))
    out = tmp_path / "out"
    with pytest.raises((DigestMismatch, AssemblyError), match=r"memory\.bin chunk 5"):
        assemble(chunk_map, None, out, tmp_path / "blobs")
    assert not out.exists()


def test_wrong_parent_is_detected(tmp_path):
    cs = 65536
    rng = random.Random(3)
    parent = random_image(tmp_path / "p", rng, 32 * cs)
    other = random_image(tmp_path / "o", rng, 32 * cs)
    child = mutate_image(parent, tmp_path / "c", rng)
    chunk_map, _, _ = build_layer(parent, child, tmp_path / "blobs")
    with pytest.raises(DigestMismatch, match=r"assembled memory.bin"):
        assemble(chunk_map, other, tmp_path / "out", tmp_path / "blobs")
    assert not (tmp_path / "out").exists()
    with pytest.raises(AssemblyError, match="none given"):
        assemble(chunk_map, None, tmp_path / "out", tmp_path / "blobs")


def test_a_frame_must_span_its_entry_exactly():
    """Issue 16 item 6: bytes after the frame inside the entry's length are refused (hub push and client pull
    both go through decompress_chunk)."""
    import blake3
    import zstandard

    from manifest.assemble import decompress_chunk
    from manifest.errors import AssemblyError

    chunk = bytes(range(256)) * 256
    digest = "blake3:" + blake3.blake3(chunk).hexdigest()
    frame = zstandard.ZstdCompressor(level=3).compress(chunk)
    assert decompress_chunk(frame, len(chunk), digest, "chunk 0") == chunk
    assert decompress_chunk(memoryview(frame), len(chunk), digest, "chunk 0") == chunk
    with pytest.raises(AssemblyError, match="chunk 0: 5 bytes follow the zstd frame"):
        decompress_chunk(frame + b"extra", len(chunk), digest, "chunk 0")
    with pytest.raises(AssemblyError, match=r"chunk 0: .*truncated"):
        decompress_chunk(frame[:-2], len(chunk), digest, "chunk 0")
