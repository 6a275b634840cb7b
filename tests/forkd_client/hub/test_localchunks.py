"""LocalChunkIndex: chunks found in installed files, used only while those files are trusted."""

from __future__ import annotations

import os
import time
from pathlib import Path

from blake3 import blake3

from forkd_client.hub.localchunks import LocalChunkIndex
from forkd_client.verified import VerifiedRecord
from manifest.digest import digest_file

CHUNK = 64 << 10


def installed_file(tmp_path: Path, record: VerifiedRecord) -> tuple[Path, list[str]]:
    path = tmp_path / "memory.bin"
    path.write_bytes(os.urandom(3 * CHUNK))
    past = time.time_ns() - 10**10  # settled, as the store leaves installed files
    os.utime(path, ns=(past, past))
    record.record(path, {"blake3": str(digest_file(path)["blake3"])})
    data = path.read_bytes()
    return path, ["blake3:" + blake3(data[i : i + CHUNK]).hexdigest() for i in range(0, len(data), CHUNK)]


def test_known_and_read_a_trusted_file(tmp_path):
    with VerifiedRecord(tmp_path / "verified.db") as record:
        path, digests = installed_file(tmp_path, record)
        index = LocalChunkIndex(tmp_path / "chunk-index.db", record)
        index.add(path, ((d, i * CHUNK, CHUNK) for i, d in enumerate(digests)))
        other = "blake3:" + "0" * 64
        assert index.known([*digests, other, digests[0]]) == set(digests)
        assert index.read(digests[1]) == path.read_bytes()[CHUNK : 2 * CHUNK]
        assert index.read(other) is None
        index.close()


def test_a_changed_file_is_never_read(tmp_path):
    with VerifiedRecord(tmp_path / "verified.db") as record:
        path, digests = installed_file(tmp_path, record)
        index = LocalChunkIndex(tmp_path / "chunk-index.db", record)
        index.add(path, ((d, i * CHUNK, CHUNK) for i, d in enumerate(digests)))
        with open(path, "r+b") as f:
            f.write(b"\0" * CHUNK)  # the record no longer trusts the file
        assert index.read(digests[1]) is None
        assert index.known(digests) == set()  # its rows were dropped when found untrusted
        index.close()
