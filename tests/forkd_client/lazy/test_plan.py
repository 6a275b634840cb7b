"""forkd_client.lazy.plan and forkd_client.hub.lazystate: the chunk table of a chain head, its requests, and the
staged state a later pull reads (bad input included)."""

from __future__ import annotations

import pytest

from forkd_client.exitcodes import EXIT_ERROR, EXIT_NETWORK, EXIT_VERIFICATION, exit_code_for
from forkd_client.hub.errors import HubUnreachable
from forkd_client.hub.lazystate import present_chunks, write_chunk_list
from forkd_client.lazy.errors import (
    ChunkCorrupt,
    ChunkFailure,
    ChunksUnreachable,
    ChunkUnfetchable,
    LazyUnsupported,
    chunk_error,
)
from forkd_client.lazy.plan import ImagePlan
from forkd_client.lazy.profile import parse_profile, profile_document
from manifest.model import ChunkEntry, ChunkMap

CS = 64 << 10
B1, B2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def _digest(n: int) -> str:
    return "blake3:" + f"{n:064x}"


def _map(entries: list[ChunkEntry], *, size: int = 8 * CS, chunk_size: int = CS, blob: str = B1) -> ChunkMap:
    return ChunkMap("memory.bin", size, chunk_size, _digest(999), None, (blob,), tuple(entries))


def _data(index: int, offset: int, length: int = 100) -> ChunkEntry:
    return ChunkEntry(index, _digest(index + offset), 0, offset, length)


def _zero(index: int) -> ChunkEntry:
    return ChunkEntry(index, None, None, None, None)


def test_the_last_map_listing_a_chunk_wins_and_unlisted_chunks_are_zero() -> None:
    base = _map([_data(0, 0), _data(1, 100), _data(2, 200)])
    link = _map([_data(1, 0), _zero(2)], blob=B2)
    plan = ImagePlan.from_maps([("L0", "acme/a", base), ("L1", "acme/b", None), ("L2", "acme/c", link)])
    assert plan.count == 8 and plan.data_chunks() == [0, 1]
    assert plan.sources[0].layer == "L0" and plan.sources[1].layer == "L2"  # type: ignore[union-attr]
    assert plan.sources[1].repository == "acme/c" and plan.sources[2] is None  # type: ignore[union-attr]


def test_covering_clips_to_the_image() -> None:
    plan = ImagePlan(3 * CS - 10, CS, [None, None, None])
    assert list(plan.covering(CS - 1, 2)) == [0, 1]
    assert list(plan.covering(2 * CS, 1 << 20)) == [2]
    assert list(plan.covering(3 * CS, 10)) == []
    assert plan.length(2) == CS - 10


def test_requests_coalesce_touching_frames_and_fetch_a_shared_frame_once() -> None:
    entries = [_data(0, 0), _data(1, 100), _data(3, 500)]
    shared = ChunkEntry(5, _digest(0), 0, 0, 100)  # chunk 5 holds the same frame as chunk 0
    plan = ImagePlan.from_maps([("L0", "acme/a", _map([*entries, shared]))])
    requests, places = plan.requests([0, 1, 3, 5, 7], 8 << 20)
    assert requests == [("acme/a", B1, [(0, 200), (500, 100)])]
    assert places[(B1, 0)] == [0, 5] and places[(B1, 500)] == [3]


def test_a_chain_whose_memory_geometry_changes_is_refused_by_name() -> None:
    with pytest.raises(LazyUnsupported, match=r"layer L1: memory\.bin is 1,048,576 bytes"):
        ImagePlan.from_maps([("L0", "r", _map([])), ("L1", "r", _map([], size=16 * CS))])
    with pytest.raises(LazyUnsupported, match=r"no layer of the chain has a memory\.bin"):
        ImagePlan.from_maps([("L0", "r", None)])


def test_staged_state_that_does_not_parse_offers_no_chunks(tmp_path) -> None:
    image = tmp_path / "memory.bin"
    image.write_bytes(bytes(2 * CS))
    assert present_chunks(image) == {}  # no chunk list, no bitmap
    write_chunk_list(image, CS, [_digest(1), None])
    (tmp_path / "memory.bin.present").write_bytes(b"\x01\x01")
    assert present_chunks(image) == {_digest(1): (0, CS)}
    (tmp_path / "memory.bin.present").write_bytes(b"\x01")  # wrong length
    assert present_chunks(image) == {}
    (tmp_path / "memory.bin.chunks").write_text("not a size\n\n\n")
    assert present_chunks(image) == {}
    write_chunk_list(image, CS, [_digest(1)])  # disagrees with the file's size
    assert present_chunks(image) == {}


def test_chunk_errors_name_the_first_chunks_and_count_the_rest() -> None:
    failures = [ChunkFailure("L", i, i * CS, _digest(i), "boom", corrupt=i == 3) for i in range(5)]
    error = chunk_error(failures)
    assert isinstance(error, ChunkCorrupt) and error.failures == failures
    assert str(error).startswith("layer L: memory.bin chunk 0 (offset 0, blake3:")
    assert str(error).endswith("(and 2 more chunks)")
    assert isinstance(chunk_error(failures[:1]), ChunkUnfetchable)
    assert "could not be fetched: boom" in str(chunk_error(failures[:1]))
    assert exit_code_for(chunk_error(failures[:1])) == EXIT_ERROR  # e.g. a 404: the hub answered
    assert exit_code_for(error) == EXIT_VERIFICATION


def test_chunks_nobody_answered_for_exit_with_the_network_class() -> None:
    gone = [
        ChunkFailure("L", i, i * CS, _digest(i), "connection refused", corrupt=False, unreachable=True)
        for i in range(2)
    ]
    error = chunk_error(gone)
    assert isinstance(error, ChunksUnreachable) and isinstance(error, HubUnreachable)
    assert exit_code_for(error) == EXIT_NETWORK
    mixed = [*gone, ChunkFailure("L", 9, 9 * CS, _digest(9), "404", corrupt=False)]
    assert exit_code_for(chunk_error(mixed)) == EXIT_ERROR


@pytest.mark.parametrize(
    ("document", "why"),
    [
        (b'{"file": "rootfs.ext4", "chunkSize": 65536, "chunks": []}', "not an access profile of memory.bin"),
        (b'{"file": "memory.bin", "chunkSize": 4096, "chunks": []}', "chunk size 4096 is not the image's 65536"),
        (b'{"file": "memory.bin", "chunkSize": 65536}', "chunk list is missing"),
        (b'{"file": "memory.bin", "chunkSize": 65536, "chunks": [0, 1, 2, 3, 4]}', "longer than the image"),
        (b'{"file": "memory.bin", "chunkSize": 65536, "chunks": [3, -1]}', r"outside 0\.\.3"),
        (b'{"file": "memory.bin", "chunkSize": 65536, "chunks": [true]}', r"outside 0\.\.3"),
        (b"[]", "not an access profile"),
    ],
)
def test_a_malformed_access_profile_is_refused_naming_why(document: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_profile(document, CS, 4)


def test_an_access_profile_round_trips_without_repeats() -> None:
    assert parse_profile(profile_document(CS, [3, 1, 3, 0]), CS, 4) == [3, 1, 0]
