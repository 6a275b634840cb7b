import hashlib

import blake3
import pytest

from manifest.digest import (
    Digest,
    Hasher,
    digest_bytes,
    digest_file,
    is_digest,
    parse_digest,
    verify_bytes,
    verify_file,
)
from manifest.errors import DigestMismatch, InvalidDigest

HEX = "ab" * 32


def test_parse_round_trip():
    d = parse_digest(f"blake3:{HEX}")
    assert d == Digest("blake3", HEX)
    assert str(d) == f"blake3:{HEX}"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (HEX, "no algorithm prefix"),
        (f"md5:{HEX}", "unsupported algorithm 'md5'"),
        (f"sha256:{HEX.upper()}", "64 lowercase hex"),
        ("sha256:abc", "64 lowercase hex"),
        (f"blake3:{HEX}0", "64 lowercase hex"),
        ("", "no algorithm prefix"),
    ],
)
def test_parse_rejects_with_a_clear_message(text, fragment):
    with pytest.raises(InvalidDigest, match=fragment):
        parse_digest(text)
    assert not is_digest(text)


def test_parse_rejects_non_strings():
    with pytest.raises(InvalidDigest):
        parse_digest(42)  # type: ignore[arg-type]


def test_digest_bytes_matches_reference_implementations():
    data = b"forkd" * 1000
    assert str(digest_bytes(data)) == "blake3:" + blake3.blake3(data).hexdigest()
    assert str(digest_bytes(data, "sha256")) == "sha256:" + hashlib.sha256(data).hexdigest()


def test_streaming_hasher_equals_one_shot():
    parts = [b"a" * 10, b"b" * 100_000, b"", b"c"]
    for alg in ("blake3", "sha256"):
        h = Hasher(alg)
        for p in parts:
            h.update(p)
        assert h.digest() == digest_bytes(b"".join(parts), alg)
        assert h.size == sum(map(len, parts))


def test_unknown_algorithm_hasher():
    with pytest.raises(InvalidDigest):
        Hasher("md5")


def test_digest_file_single_pass_both_algorithms(tmp_path):
    data = bytes(range(256)) * 40000
    path = tmp_path / "f"
    path.write_bytes(data)
    got = digest_file(path, ("blake3", "sha256"))
    assert got["blake3"] == digest_bytes(data)
    assert got["sha256"] == digest_bytes(data, "sha256")


@pytest.mark.parametrize("size", [0, 1, 32 << 10, (8 << 20) - 1, 8 << 20, (8 << 20) + 1, (16 << 20) + 5])
@pytest.mark.parametrize("algorithm", ["blake3", "sha256"])
def test_digest_file_one_algorithm_any_size(tmp_path, size, algorithm):
    """One algorithm reads into a buffer sized to the file (at most 8 MiB): every size around the
    read size hashes every byte once."""
    data = (bytes(range(251)) * (size // 251 + 1))[:size]
    path = tmp_path / "f"
    path.write_bytes(data)
    assert digest_file(path, (algorithm,)) == {algorithm: digest_bytes(data, algorithm)}


def test_verify_names_what_mismatched(tmp_path):
    verify_bytes(b"x", digest_bytes(b"x"))
    with pytest.raises(DigestMismatch, match="chunk 7"):
        verify_bytes(b"y", str(digest_bytes(b"x")), what="chunk 7")
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    verify_file(path, digest_bytes(b"hello", "sha256"))
    with pytest.raises(DigestMismatch, match=str(path)):
        verify_file(path, digest_bytes(b"other"))


def test_mapped_digest_equals_the_read_one(tmp_path):
    """digest_file(mapped=True) hashes the same bytes: empty, sparse and partly written files."""
    import os

    from manifest.digest import digest_file

    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(3 << 20)
        f.seek(1 << 20)
        f.write(os.urandom(100_000))
    for path in (empty, sparse):
        assert digest_file(path, mapped=True) == digest_file(path)


def test_mapped_digest_across_windows(tmp_path, monkeypatch):
    """A file longer than one mapping window, its end not on a window boundary, hashes the same
    mapped as read (data in the first, a middle and the last window, one data range across a
    window boundary; holes between)."""
    import mmap
    import os

    from manifest import digest as digest_module

    window = 4 * mmap.ALLOCATIONGRANULARITY
    monkeypatch.setattr(digest_module, "_MAP_WINDOW", window)
    path = tmp_path / "long"
    with open(path, "wb") as f:
        f.truncate(5 * window + 123)
        for offset in (10, 2 * window - 7, 5 * window + 100):
            f.seek(offset)
            f.write(os.urandom(23))
        f.seek(window // 2 + 4096)  # one data range longer than a window, starting mid-window
        f.write(os.urandom(window + window // 3))
    assert digest_module.digest_file(path, mapped=True) == digest_module.digest_file(path)


@pytest.mark.integration  # mounts a tmpfs (tests/tiers.py)
def test_mapped_digest_does_not_keep_the_file_resident(tmp_path):
    """Hashing a 512 MiB file mapped leaves the process's peak RSS far below the file's size
    (it maps one window at a time): a whole-file mapping held every page it touched."""
    import subprocess
    import sys

    path = tmp_path / "big"
    with open(path, "wb") as f:
        f.truncate(512 << 20)
        f.seek(100 << 20)
        f.write(b"x" * 4096)
    probe = (
        "import resource, sys\n"
        "from manifest.digest import digest_file\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "digest_file(sys.argv[1], mapped=True)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    grown_kib = int(
        subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True).stdout
    )
    assert grown_kib < 256 << 10, f"peak RSS grew by {grown_kib} KiB while hashing a 512 MiB file"
