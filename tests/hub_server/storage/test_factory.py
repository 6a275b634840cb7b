"""create_store turns spec strings into backends, and explains every mistake."""

import re
from pathlib import Path

import pytest

from hub_server.storage.base import BlobStore
from hub_server.storage.errors import StorageUnavailable
from hub_server.storage.factory import BACKENDS, create_store, describe_backends
from hub_server.storage.filesystem import FilesystemStore
from hub_server.storage.memory import MemoryStore


def test_memory_spec() -> None:
    assert isinstance(create_store("memory"), MemoryStore)


def test_filesystem_spec_creates_the_root(tmp_path: Path) -> None:
    store = create_store(f"filesystem root={tmp_path / 'blobs'}")
    assert isinstance(store, FilesystemStore)
    assert store.root == str((tmp_path / "blobs").resolve())
    assert (tmp_path / "blobs" / "_staging").is_dir()


def test_quoted_values_may_contain_spaces(tmp_path: Path) -> None:
    store = create_store(f"filesystem root='{tmp_path / 'hub data'}'")
    assert isinstance(store, FilesystemStore) and store.root.endswith("hub data")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty storage spec; expected one of: filesystem root=...; memory"),
        ("   ", "empty storage spec"),
        ("s4 bucket=x", "unknown storage backend 's4'; valid backends: filesystem root=...; memory"),
        ("filesystem", "storage backend 'filesystem' needs parameter(s) root"),
        (
            "filesystem root=/a colour=blue",
            "unknown parameter 'colour' for storage backend 'filesystem'; valid parameters: root",
        ),
        ("memory size=1", "unknown parameter 'size' for storage backend 'memory'; valid parameters: none"),
        ("filesystem root=/a root=/b", "parameter 'root' given twice"),
        ("filesystem /var/lib/blobs", "'/var/lib/blobs' for 'filesystem' is not of the form name=value"),
        ("filesystem =x", "'=x' for 'filesystem' is not of the form name=value"),
        ("filesystem root='/unclosed", "cannot parse storage spec"),
        ("filesystem root=relative/dir", "filesystem root must be an absolute path, got 'relative/dir'"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        create_store(spec)
    assert message in str(caught.value)


def test_a_root_that_cannot_be_created_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(StorageUnavailable):
        create_store(f"filesystem root={tmp_path / 'a-file' / 'blobs'}")


def test_every_registered_backend_builds_a_store_with_its_name(tmp_path: Path) -> None:
    examples = {"root": str(tmp_path / "r"), "bucket": "snapshots"}
    for name, backend in BACKENDS.items():
        spec = " ".join([name, *(f"{p}={examples[p]}" for p in sorted(backend.required))])
        store = create_store(spec)
        assert isinstance(store, BlobStore) and store.name == name
    assert describe_backends().split("; ")[0].startswith("filesystem")
