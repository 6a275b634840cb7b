"""Issue 27 item 2 (client side): a hostile hub's declared file sizes and chunk counts never make
``forkd pull`` allocate or write in proportion to them before they are checked. The hub serves an
honest push of one base; a proxy forges it into an all-zero memory.bin of the declared geometry, with
a correct chunk-tree digest and a matching (empty) chunk map, so every digest check passes. Memory is
measured in-process with tracemalloc."""

from __future__ import annotations

import os
import struct
import tracemalloc
from pathlib import Path

import blake3
import pytest

from forkd_client.errors import UsageError
from forkd_client.hub.client import HubClient
from forkd_client.hub.errors import HubError
from forkd_client.hub.limits import ClientLimits, DeclarationTooLarge
from forkd_client.hub.pull import pull
from forkd_client.hub.push import push
from forkd_client.hub.reference import Reference
from forkd_client.store import SnapshotStore
from manifest import mediatypes as mt
from manifest.chunktree import DOMAIN
from manifest.digest import digest_bytes
from manifest.model import canonical_json
from tests.forkd_client.snapshots import make_base_source

from .hubproxy import proxy
from .test_hostile_hub import forging

GIB, TIB = 1 << 30, 1 << 40

#: the chunk-tree digest of 1 TiB of zeros in 4 KiB chunks (268,435,456 zero chunk digests: 8 GiB of
#: zeros hashed once with :func:`zero_tree`, too slow to repeat in every run)
TIB_4K_ZERO_TREE = "blake3:2f1e354a96ef761c451456f56b00516b024adce7380c819f7e1815e2ebb85efa"


def zero_tree(size: int, chunk_size: int) -> str:
    """The chunk-tree digest of ``size`` zero bytes (docs/manifest-format.md §2), hashed in 8 MiB steps."""
    h = blake3.blake3(DOMAIN)
    h.update(struct.pack("<QI", size, chunk_size))
    left = -(-size // chunk_size) * 32
    step = bytes(8 << 20)
    while left:
        n = min(left, len(step))
        h.update(memoryview(step)[:n])
        left -= n
    return "blake3:" + h.hexdigest()


@pytest.fixture
def base_pushed(store: SnapshotStore, inproc_hub, tmp_path: Path) -> tuple[str, Reference]:
    store.import_snapshot(make_base_source(tmp_path / "src-base", seed=1), "base")
    token = inproc_hub.token("ci", "push:acme/*")
    ref = Reference.parse("acme/zeros:v1")
    push(store, inproc_hub.client(token), "base", ref)
    return token, ref


def zero_memory(
    inproc_hub, token: str, size: int, chunk_size: int, tree: str, asked: list[str], *, body: bytes | None = None
) -> tuple[HubClient, str]:
    """A client of a hub whose base declares memory.bin as ``size`` zero bytes in ``chunk_size`` chunks (its chunk
    map ``body``, by default one listing no chunk)."""
    chunk_map = body or canonical_json(
        {
            "mediaType": mt.VERSIONS[2]["chunkmap"],
            "file": mt.MEMORY_FILE,
            "size": size,
            "chunkSize": chunk_size,
            "digest": tree,
            "parentDigest": None,
            "compression": "zstd",
            "blobs": [],
            "chunks": [],
        }
    )
    map_digest = str(digest_bytes(chunk_map, "sha256"))

    def edit(manifest, config):
        config["files"][mt.MEMORY_FILE] = {
            "size": size,
            "digest": tree,
            "sha256": "sha256:" + "0" * 64,  # not what a pull checks (the chunk tree is)
            "chunkSize": chunk_size,
        }
        for layer in manifest["layers"]:
            if layer["mediaType"].startswith("application/vnd.forkd.chunkmap"):
                layer.update(digest=map_digest, size=len(chunk_map))

    tamper = forging(inproc_hub, edit, {map_digest: chunk_map}, asked)
    return HubClient("http://hub.test", token, http=proxy(inproc_hub, tamper)), map_digest


def pull_traced(store: SnapshotStore, client: HubClient, ref: Reference):
    tracemalloc.start()
    try:
        try:
            result: object = pull(store, client, ref, as_tag="zeros")
        except Exception as e:  # noqa: BLE001 - returned for the test to check
            result = e
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_a_tebibyte_of_4k_chunks_is_refused_before_anything_is_fetched(base_pushed, other_store, inproc_hub):
    token, ref = base_pushed
    asked: list[str] = []
    client, map_digest = zero_memory(inproc_hub, token, TIB, 4096, TIB_4K_ZERO_TREE, asked)
    result, peak = pull_traced(other_store, client, ref)
    assert isinstance(result, DeclarationTooLarge), result
    assert result.detail == {
        "layer": result.detail["layer"],
        "field": "memory.bin size",
        "declared": TIB,
        "limit": 64 * GIB,
        "setting": "FORKD_MAX_FILE_BYTES",
    }
    assert "1,099,511,627,776" in str(result) and "68,719,476,736" in str(result)
    assert "FORKD_MAX_FILE_BYTES" in str(result)
    assert map_digest not in asked  # refused from the config, before the chunk map was asked for
    assert peak < 64 << 20, peak
    assert "zeros" not in other_store.tags()


def test_more_chunks_than_the_limit_are_refused_in_bounded_memory(base_pushed, other_store, inproc_hub):
    token, ref = base_pushed
    size = 32 * GIB  # 8,388,608 chunks of 4 KiB: a 256 MiB chunk list
    asked: list[str] = []
    client, map_digest = zero_memory(inproc_hub, token, size, 4096, zero_tree(size, 4096), asked)
    result, peak = pull_traced(other_store, client, ref)
    assert isinstance(result, DeclarationTooLarge), result
    assert result.declared == 8_388_608 and result.limit == 1_048_576
    assert result.setting == "FORKD_MAX_FILE_CHUNKS" and "FORKD_MAX_FILE_CHUNKS" in str(result)
    assert map_digest not in asked
    assert peak < 64 << 20, peak
    assert "zeros" not in other_store.tags()


def test_a_sparse_file_at_the_limits_is_pulled_in_bounded_memory_as_holes(base_pushed, other_store, inproc_hub):
    token, ref = base_pushed
    size = 64 * GIB  # 1,048,576 chunks of 64 KiB: both limits exactly
    asked: list[str] = []
    client, _ = zero_memory(inproc_hub, token, size, 64 << 10, zero_tree(size, 64 << 10), asked)
    result, peak = pull_traced(other_store, client, ref)
    assert not isinstance(result, Exception), result
    memory = other_store.path("zeros") / mt.MEMORY_FILE
    st = os.stat(memory)
    assert st.st_size == size
    assert st.st_blocks * 512 < 1 << 20  # holes, nothing written for the declared zeros
    # one 32 MiB chunk list (32 bytes a chunk) and the pull around it; not three transient copies of it
    assert peak < 56 << 20, peak


def test_a_chunk_map_listing_more_entries_than_its_file_has_chunks_is_refused_before_it_is_parsed(
    base_pushed, other_store, inproc_hub
):
    token, ref = base_pushed
    size = 64 << 10  # one chunk
    entries = ",".join(f"[{i},null]" for i in range(2_000_000))  # 26 MiB: under the 64 MiB a chunk map may be
    head = canonical_json(
        {
            "mediaType": mt.VERSIONS[2]["chunkmap"],
            "file": mt.MEMORY_FILE,
            "size": size,
            "chunkSize": size,
            "digest": zero_tree(size, size),
            "parentDigest": None,
            "compression": "zstd",
            "blobs": [],
        }
    )
    body = head[:-1] + b',"chunks":[' + entries.encode() + b"]}"
    del entries
    asked: list[str] = []
    client, map_digest = zero_memory(inproc_hub, token, size, size, zero_tree(size, size), asked, body=body)
    result, peak = pull_traced(other_store, client, ref)
    assert isinstance(result, HubError), result
    assert "holds up to 2,000,000 entries, more than the file's 1 chunks" in str(result)
    assert map_digest in asked
    # not its parse: ~10 bytes of Python objects per byte of JSON (the body itself is the proxy's, not traced)
    assert peak < 64 << 20, peak
    assert "zeros" not in other_store.tags()


def test_the_limits_are_read_from_the_environment():
    assert ClientLimits.from_env({}) == ClientLimits(64 * GIB, 1 << 20)
    assert ClientLimits.from_env({"FORKD_MAX_FILE_BYTES": "1TiB", "FORKD_MAX_FILE_CHUNKS": "16777216"}) == (
        ClientLimits(TIB, 1 << 24)
    )
    with pytest.raises(UsageError, match="FORKD_MAX_FILE_BYTES: not a size"):
        ClientLimits.from_env({"FORKD_MAX_FILE_BYTES": "lots"})
    with pytest.raises(UsageError, match="FORKD_MAX_FILE_CHUNKS: not a count"):
        ClientLimits.from_env({"FORKD_MAX_FILE_CHUNKS": "-1"})
