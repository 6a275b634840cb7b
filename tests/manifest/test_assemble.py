"""FileAssembler with ``background``: the parent is set up on a thread while chunks are verified:
cloned (a reflink) before any write where the filesystem reflinks, else copied around the chunks
the layer sets while they are written."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from manifest import assemble as assemble_mod
from manifest.assemble import FileAssembler, blob_dir_frames
from manifest.chunktree import ChunkList

from .layers import build_layer

CHUNK = 65536


def _images(tmp_path: Path) -> tuple[Path, Path]:
    parent, child = tmp_path / "parent.bin", tmp_path / "child.bin"
    data = bytearray(os.urandom(16 * CHUNK))
    parent.write_bytes(data)
    data[3 * CHUNK : 4 * CHUNK] = os.urandom(CHUNK)
    data[9 * CHUNK : 10 * CHUNK] = bytes(CHUNK)  # a chunk that becomes zero
    child.write_bytes(data)
    return parent, child


def test_with_reflinks_the_constructor_returns_before_the_clone_and_writes_wait_for_it(tmp_path, monkeypatch):
    monkeypatch.setattr(assemble_mod, "can_reflink", lambda directory: True)
    parent, child = _images(tmp_path)
    chunk_map, _, _ = build_layer(parent, child, tmp_path / "blobs", CHUNK)
    release, cloning = threading.Event(), threading.Event()
    real_clone = assemble_mod.clone_file

    def slow_clone(src, dst):
        cloning.set()
        assert release.wait(30), "never released"  # a deadlock guard, not a timing assertion
        return real_clone(src, dst)

    monkeypatch.setattr(assemble_mod, "clone_file", slow_clone)
    assembler = FileAssembler(chunk_map, tmp_path / "out.bin", parent=parent, background=True)
    assert cloning.wait(30)
    assert not assembler._ready.is_set()  # back to the caller while the clone is still running
    frames = blob_dir_frames(tmp_path / "blobs")
    entry = next(e for e in chunk_map.entries if not e.is_zero)
    chunk = assemble_mod._read_chunk(chunk_map, entry, assembler.length(entry.index), frames)
    writer = threading.Thread(target=assembler.write, args=(entry.index, chunk))
    writer.start()
    writer.join(0.2)
    assert writer.is_alive()  # the write waits for the clone
    release.set()
    writer.join(30)
    assert not writer.is_alive()
    done = assembler.finish(chunk_list=None)
    assert done.path.read_bytes() == child.read_bytes()


def test_a_failed_background_clone_is_raised_by_the_next_write_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(assemble_mod, "can_reflink", lambda directory: True)
    parent, child = _images(tmp_path)
    chunk_map, _, _ = build_layer(parent, child, tmp_path / "blobs", CHUNK)

    def failing_clone(src, dst):
        Path(dst).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(assemble_mod, "clone_file", failing_clone)
    out = tmp_path / "out.bin"
    assembler = FileAssembler(chunk_map, out, parent=parent, background=True)
    with pytest.raises(OSError, match="No space left"):
        assembler.write(0, bytes(assembler.length(0)))
    with pytest.raises(OSError, match="No space left"):
        assembler.finish(chunk_list=ChunkList(chunk_map.size, CHUNK))
    assembler.close()
    assert not out.exists()  # never resumed from


def _all_chunks(chunk_map, tmp_path: Path, assembler: FileAssembler) -> list[tuple[int, bytes]]:
    frames = blob_dir_frames(tmp_path / "blobs")
    return [
        (e.index, assemble_mod._read_chunk(chunk_map, e, assembler.length(e.index), frames))
        for e in chunk_map.entries
        if not e.is_zero
    ]


def test_without_reflinks_chunks_go_in_before_the_parent_is_copied_and_the_copy_never_clobbers_them(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(assemble_mod, "can_reflink", lambda directory: False)
    parent, child = _images(tmp_path)
    chunk_map, _, _ = build_layer(parent, child, tmp_path / "blobs", CHUNK)
    release, asked, whole = threading.Event(), threading.Event(), []

    def parent_ready():  # the parent's own file is not whole yet: the copy waits for it
        asked.set()
        assert release.wait(30), "never released"  # a deadlock guard, not a timing assertion

    out = tmp_path / "out.bin"
    assembler = FileAssembler(
        chunk_map, out, parent=parent, background=True, parent_ready=parent_ready, on_ready=lambda: whole.append(1)
    )
    assert asked.wait(30)
    writer = threading.Thread(
        target=lambda: [assembler.write(i, c) for i, c in _all_chunks(chunk_map, tmp_path, assembler)]
    )
    writer.start()
    writer.join(30)
    assert not writer.is_alive()  # every chunk went in while the parent was not copied yet
    assert not whole  # not announced (not resumable) before the parent's bytes are in
    release.set()  # the parent's bytes now go in around those chunks
    done = assembler.finish(chunk_list=None)  # checks the file's digest against the map
    assert whole == [1]
    assert done.path.read_bytes() == child.read_bytes()
    assert done.clone_method is not None and done.clone_method.value != "reflink"


def test_without_reflinks_a_base_is_written_into_a_new_sparse_file_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(assemble_mod, "can_reflink", lambda directory: False)
    _, child = _images(tmp_path)
    chunk_map, _, _ = build_layer(None, child, tmp_path / "blobs", CHUNK)
    assembler = FileAssembler(chunk_map, tmp_path / "out.bin", parent=None, background=True)
    for index, chunk in _all_chunks(chunk_map, tmp_path, assembler):
        assembler.write(index, chunk)
    assert assembler.finish(chunk_list=None).path.read_bytes() == child.read_bytes()


def test_without_reflinks_a_failed_parent_copy_is_raised_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(assemble_mod, "can_reflink", lambda directory: False)
    parent, child = _images(tmp_path)
    chunk_map, _, _ = build_layer(parent, child, tmp_path / "blobs", CHUNK)

    def failing_copy(sfd, dfd, size, keep):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(assemble_mod, "copy_ranges_except", failing_copy)
    out = tmp_path / "out.bin"
    assembler = FileAssembler(chunk_map, out, parent=parent, background=True)
    with pytest.raises(OSError, match="No space left"):
        assembler.wait_whole()
    with pytest.raises(OSError, match="No space left"):
        assembler.write(0, bytes(assembler.length(0)))
    with pytest.raises(OSError, match="No space left"):
        assembler.finish(chunk_list=ChunkList(chunk_map.size, CHUNK))
    assembler.close()
    assert not out.exists()  # never resumed from


def test_writeback_starts_every_step_of_written_bytes_and_after_a_parent_copy(tmp_path, monkeypatch):
    """So that finish's fsync has little left: the disk starts on chunks (and on the copied parent)
    while the rest arrives."""
    started: list[int] = []
    monkeypatch.setattr(assemble_mod, "start_writeback", lambda fd: started.append(fd))
    monkeypatch.setattr(assemble_mod, "WRITEBACK_STEP", 4 * CHUNK)
    monkeypatch.setattr(assemble_mod, "can_reflink", lambda directory: False)
    _, child = _images(tmp_path)
    chunk_map, _, _ = build_layer(None, child, tmp_path / "blobs", CHUNK)
    assembler = FileAssembler(chunk_map, tmp_path / "out.bin", parent=None, background=True)
    chunks = list(_all_chunks(chunk_map, tmp_path, assembler))
    for index, chunk in chunks:
        assembler.write(index, chunk)
    assert len(started) == len(chunks) // 4  # one start per 4 chunks' bytes
    assembler.finish(chunk_list=None)

    (tmp_path / "link").mkdir()
    parent, child = _images(tmp_path / "link")
    link_map, _, _ = build_layer(parent, child, tmp_path / "link-blobs", CHUNK)
    started.clear()
    linked = FileAssembler(link_map, tmp_path / "link.bin", parent=parent, background=True)
    linked.wait_whole()
    assert started  # the parent's copied bytes
    linked.close()
