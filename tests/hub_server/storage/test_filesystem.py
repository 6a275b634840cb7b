"""FilesystemStore passes the shared suite, plus checks of its on-disk layout."""

import errno
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from hub_server.storage import filesystem
from hub_server.storage.base import BlobStore
from hub_server.storage.errors import InvalidKey, StorageFull, StorageUnavailable, WriterClosed
from hub_server.storage.filesystem import FilesystemStore
from hub_server.storage.testing import BlobStoreConformance


class TestFilesystemStore(BlobStoreConformance):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[BlobStore]:
        store = FilesystemStore(tmp_path / "blobs")
        yield store
        await store.close()

    async def staged_count(self, store: BlobStore) -> int:
        assert isinstance(store, FilesystemStore)
        return len(list(Path(store.staging).iterdir()))


# -- filesystem-specific behaviour ---------------------------------------------------------

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "blobs"


async def test_keys_are_plain_files_under_root(root: Path) -> None:
    store = FilesystemStore(root)
    await store.put("blobs/blake3/ab/abcdef", b"bytes")
    assert (root / "blobs" / "blake3" / "ab" / "abcdef").read_bytes() == b"bytes"
    assert sorted(p.name for p in root.iterdir()) == ["_staging", "blobs"]


async def test_delete_prunes_empty_parents_but_not_root_or_siblings(root: Path) -> None:
    store = FilesystemStore(root)
    await store.put("a/b/c/d", b"x")
    await store.put("a/keep", b"x")
    await store.delete("a/b/c/d")
    assert not (root / "a" / "b").exists()
    assert (root / "a" / "keep").is_file()
    await store.delete("a/keep")
    assert sorted(p.name for p in root.iterdir()) == ["_staging"]
    await store.put("m/n/src", b"x")
    await store.move("m/n/src", "dst")
    assert not (root / "m").exists()


async def test_empty_directory_left_by_a_crash_does_not_block_a_key(root: Path) -> None:
    store = FilesystemStore(root)
    (root / "x" / "y").mkdir(parents=True)  # as if we crashed between unlink and prune
    await store.put("x/y", b"now a key")
    assert await store.read("x/y") == b"now a key"


async def test_staging_and_stray_files_are_never_keys(root: Path) -> None:
    store = FilesystemStore(root)
    await store.put("real", b"x")
    (root / "_staging" / "orphan.part").write_bytes(b"left by a crash")
    (root / "bad\nname").write_bytes(b"not a key")
    assert [key async for key in store.list()] == ["real"]


async def test_symlinks_cannot_lead_outside_root(root: Path, tmp_path: Path) -> None:
    store = FilesystemStore(root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    (root / "link").symlink_to(outside)
    for attempt in (store.read("link/secret"), store.put("link/new", b"x"), store.stat("link/secret")):
        with pytest.raises(InvalidKey):
            await attempt
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


async def test_disk_full_breaks_the_writer_and_leaves_nothing(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FilesystemStore(root)

    def no_space(fd: int, *chunks: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    writer = await store.writer("full")
    monkeypatch.setattr(filesystem, "_write_all", no_space)  # fault injection: a full disk
    with pytest.raises(StorageFull) as caught:
        await writer.write(b"x" * (filesystem.WRITE_BUFFER + 1))
    assert isinstance(caught.value, OSError) and caught.value.errno == errno.ENOSPC
    monkeypatch.undo()
    with pytest.raises(WriterClosed):
        await writer.commit()
    await writer.cancel()
    assert list((root / "_staging").iterdir()) == []
    assert not await store.exists("full")


async def test_unusable_root_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StorageUnavailable):
        FilesystemStore(tmp_path / "file" / "root")


CRASH_MID_WRITE = """
import os, sys, anyio
from hub_server.storage.filesystem import FilesystemStore

async def main():
    store = FilesystemStore(sys.argv[1])
    writer = await store.writer("victim")
    await writer.write(b"N" * 2_000_000)
    os.kill(os.getpid(), 9)  # no cancel, no finalizers: a real crash

anyio.run(main)
"""


@pytest.mark.slow
async def test_sigkill_mid_write_keeps_the_old_bytes(root: Path) -> None:
    store = FilesystemStore(root)
    await store.put("victim", b"old")
    result = subprocess.run([sys.executable, "-c", CRASH_MID_WRITE, str(root)], timeout=60)
    assert result.returncode == -signal.SIGKILL
    assert await store.read("victim") == b"old"
    assert [key async for key in store.list()] == ["victim"]
    assert len(list((root / "_staging").iterdir())) == 1
    assert await store.purge_staging(timedelta(0)) == 1
    assert list((root / "_staging").iterdir()) == []
