"""Build and assemble layers in tests, through the public manifest API only."""

from __future__ import annotations

import os
from pathlib import Path

from manifest.assemble import assemble_file, blob_dir_frames
from manifest.chunktree import file_chunk_tree
from manifest.diff import diff_files
from manifest.layer import LayerBuilder
from manifest.model import ChunkMap


def build_layer(parent: Path | None, child: Path, blob_dir: Path, chunk_size: int = 65536):
    builder = LayerBuilder(blob_dir)
    builder.add_file(
        "memory.bin",
        diff_files(parent, child, chunk_size),
        size=os.path.getsize(child),
        chunk_size=chunk_size,
        digest=file_chunk_tree(child, chunk_size),
        parent_digest=None if parent is None else file_chunk_tree(parent, chunk_size),
    )
    maps, blobs = builder.finish()
    # what goes on the wire is the serialised map: round-trip it like a client would
    chunk_map = ChunkMap.from_json(maps["memory.bin"].to_json())
    return chunk_map, blobs, builder.stats


def assemble(chunk_map: ChunkMap, parent: Path | None, out: Path, blob_dir: Path):
    return assemble_file(chunk_map, out, parent=parent, frames=blob_dir_frames(blob_dir), extra_algorithms=("sha256",))
