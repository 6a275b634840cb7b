"""The storage key layout."""

from __future__ import annotations

import pytest

from hub_server.registry.core.paths import blob_key, digest_from_blob_key, upload_key
from hub_server.storage import validate_key
from manifest.errors import InvalidDigest

HEX = "ab" + "0" * 62


def test_blob_keys_are_content_addressed_and_reversible():
    for algorithm in ("blake3", "sha256"):
        key = blob_key(f"{algorithm}:{HEX}")
        assert key == f"blobs/{algorithm}/ab/{HEX}"
        assert validate_key(key) == key
        assert digest_from_blob_key(key) == f"{algorithm}:{HEX}"


@pytest.mark.parametrize("key", ["blobs/blake3/cd/" + HEX, "blobs/md5/ab/" + HEX, "uploads/x", "blobs/blake3/ab"])
def test_foreign_keys_are_not_blob_keys(key):
    assert digest_from_blob_key(key) is None


def test_bad_digests_and_upload_keys():
    with pytest.raises(InvalidDigest):
        blob_key("blake3:../../etc")
    assert upload_key("0b7c6c1e-0000-4000-8000-000000000000") == "uploads/0b7c6c1e-0000-4000-8000-000000000000"
