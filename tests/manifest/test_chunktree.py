"""Chunk-tree digests: the normative encoding (test vector of docs/manifest-format.md §2),
the list derived from a parent, and the digest of a file's bytes."""

import hashlib
import os
import struct

import blake3
import pytest

from manifest.chunktree import DOMAIN, ZERO_CHUNK, ChunkList, chunk_list_of_file, file_chunk_tree, raw_chunk_digest
from manifest.errors import InvalidDigest

#: docs/manifest-format.md §2: a 200,000-byte file of 64 KiB chunks; chunk 0 is 65,536 × "a",
#: chunk 3 (the short last one, 3,392 bytes) is "b" repeated, chunks 1 and 2 are zero.
VECTOR = "blake3:e3c2b254fb1780307e0ba4d988fbd96c41227aeff468aff5143ac8218b22685b"


def vector_file(path):
    with open(path, "wb") as f:
        f.truncate(200000)
        f.write(b"a" * 65536)
        f.seek(3 * 65536)
        f.write(b"b" * (200000 - 3 * 65536))
    return path


def test_the_documented_test_vector(tmp_path):
    path = vector_file(tmp_path / "f")
    assert file_chunk_tree(path, 65536) == VECTOR
    # the encoding spelled out by hand, as the spec writes it
    encoded = (
        DOMAIN
        + struct.pack("<QI", 200000, 65536)
        + blake3.blake3(b"a" * 65536).digest()
        + ZERO_CHUNK * 2
        + blake3.blake3(b"b" * 3392).digest()
    )
    assert "blake3:" + blake3.blake3(encoded).hexdigest() == VECTOR
    assert DOMAIN == b"forkd.chunktree.v1\x00" and bytes(32) == ZERO_CHUNK


def test_zero_chunks_have_one_digest_whatever_is_on_disk(tmp_path):
    sparse, dense = tmp_path / "sparse", tmp_path / "dense"
    with open(sparse, "wb") as f:
        f.truncate(5 * 65536)
    dense.write_bytes(bytes(5 * 65536))
    assert file_chunk_tree(sparse, 65536) == file_chunk_tree(dense, 65536) == ChunkList(5 * 65536, 65536).digest()
    assert file_chunk_tree(sparse, 65536) != file_chunk_tree(sparse, 4096)


def test_a_derived_list_matches_the_file(tmp_path):
    parent = vector_file(tmp_path / "p")
    data = bytearray(parent.read_bytes()) + os.urandom(70000)
    data[65536:65540] = b"new!"
    (tmp_path / "c").write_bytes(bytes(data))
    derived = chunk_list_of_file(parent, 65536).resized(len(data))
    derived.apply(
        [
            (1, "blake3:" + blake3.blake3(bytes(data[65536:131072])).hexdigest()),
            (3, "blake3:" + blake3.blake3(bytes(data[196608:262144])).hexdigest()),
            (4, "blake3:" + blake3.blake3(bytes(data[262144:])).hexdigest()),
        ]
    )
    assert derived.digest() == file_chunk_tree(tmp_path / "c", 65536)


def test_bad_inputs_are_refused():
    with pytest.raises(InvalidDigest, match="blake3"):
        raw_chunk_digest("sha256:" + hashlib.sha256(b"").hexdigest())
    with pytest.raises(ValueError, match="chunk size"):
        ChunkList(10, 65536).resized(10, 4096)
    with pytest.raises(IndexError):
        ChunkList(10, 65536).set(1, ZERO_CHUNK)
