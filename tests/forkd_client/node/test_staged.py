"""The peer server serves chunks a running pull has staged (forkd_client/node/staged.py): only where the staged
file's bytes hash to the digest asked for; the parent's bytes or a hole where the entry list names another chunk
are reported missing, never sent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import blake3

from forkd_client.hub.lazystate import ENTRIES_SUFFIX, write_chunk_list
from forkd_client.hub.peerwire import parse_records
from forkd_client.node.staged import StagedChunks
from forkd_client.store import SnapshotStore
from manifest import mediatypes as mt
from tests.forkd_client.node.test_peers import post
from tests.forkd_client.peering import peer_server

CHUNK = 64 << 10


def digest(data: bytes) -> str:
    return "blake3:" + blake3.blake3(data).hexdigest()


def staged_pull(store: SnapshotStore) -> tuple[Path, list[bytes]]:
    """A running pull's staged memory.bin of 3 chunks: chunk 1 written, chunk 0 the parent's bytes, chunk 2 a hole;
    returns the file and the 3 chunks the entry list says it will hold."""
    staged = store.staging_root / "resume-pull-0123abcd"
    staged.mkdir(parents=True)
    wanted = [os.urandom(CHUNK) for _ in range(3)]
    image = staged / mt.MEMORY_FILE
    with open(image, "wb") as f:
        f.write(os.urandom(CHUNK))  # the parent's bytes
        f.write(wanted[1])  # written (verified) by the pull
        f.truncate(3 * CHUNK)  # not written yet
    write_chunk_list(image, CHUNK, [digest(c) for c in wanted], suffix=ENTRIES_SUFFIX)
    return image, wanted


def test_a_staged_chunk_is_served_only_where_its_bytes_match(tmp_path: Path) -> None:
    with SnapshotStore(tmp_path / "store") as store:
        _, wanted = staged_pull(store)
        with peer_server(store.root) as service:
            status, body = post(service.url, json.dumps([digest(c) for c in wanted]).encode())
    assert status == 200, body
    records = list(parse_records(bytearray(body), [CHUNK] * 3))
    assert records[0] is None and records[2] is None
    assert bytes(records[1]) == wanted[1]  # type: ignore[arg-type]


def test_chunks_written_later_are_found_and_finished_pulls_forgotten(tmp_path: Path) -> None:
    with SnapshotStore(tmp_path / "store") as store:
        image, wanted = staged_pull(store)
        staged = StagedChunks(store.staging_root)
        staged.refresh()
        assert staged.read(digest(wanted[2])) is None
        with open(image, "r+b") as f:  # the pull writes chunk 2 (the file's size and entry list unchanged: cached map)
            f.seek(2 * CHUNK)
            f.write(wanted[2])
        staged.refresh()
        assert staged.read(digest(wanted[2])) == wanted[2]
        for path in image.parent.iterdir():  # the pull installed: its staged directory is gone
            path.unlink()
        image.parent.rmdir()
        staged.refresh()
        assert staged.read(digest(wanted[1])) is None


def test_past_a_run_of_unwritten_chunks_a_request_stops_reading_staged_files(tmp_path: Path) -> None:
    """A swarm member asks for an owner's chunks in the order the owner fetches them: after STAGED_MISSES unwritten
    ones in a row the rest of the request is answered missing unread (each staged lookup hashes a whole chunk, and
    15 members re-asking for what an owner lacks cost it more CPU than serving: bench/fleet_pull.py mode c). A chunk
    written before that run is served; one written after it is missing now and served when asked again."""
    from forkd_client.node.peers import STAGED_MISSES

    n = STAGED_MISSES + 3
    with SnapshotStore(tmp_path / "store") as store:
        staged = store.staging_root / "resume-pull-4567cdef"
        staged.mkdir(parents=True)
        wanted = [os.urandom(CHUNK) for _ in range(n)]
        image = staged / mt.MEMORY_FILE
        with open(image, "wb") as f:
            f.write(wanted[0])  # written; then STAGED_MISSES unwritten; then the last two written
            f.seek((n - 2) * CHUNK)
            f.write(wanted[-2] + wanted[-1])
        write_chunk_list(image, CHUNK, [digest(c) for c in wanted], suffix=ENTRIES_SUFFIX)
        with peer_server(store.root) as service:
            status, body = post(service.url, json.dumps([digest(c) for c in wanted]).encode())
            assert status == 200, body
            records = list(parse_records(bytearray(body), [CHUNK] * n))
            assert bytes(records[0]) == wanted[0]  # type: ignore[arg-type]
            assert records[1:] == [None] * (n - 1)
            status, body = post(service.url, json.dumps([digest(c) for c in wanted[-2:]]).encode())
    assert status == 200, body
    assert [bytes(r) for r in parse_records(bytearray(body), [CHUNK] * 2)] == wanted[-2:]  # type: ignore[arg-type]
