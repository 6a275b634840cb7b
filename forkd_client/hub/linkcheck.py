"""What a pull checks about one link, apart from fetching it (:mod:`.pull`'s checks, in one place).

- :func:`fetch_maps`: a layer's chunk maps, each against its digest and the layer's config;
- :func:`chunk_lists`: format v2, each file's chunk list from the parent's and the map, O(chunks);
- :func:`verify_files`: on the verifier thread, each assembled file against its layer (v2: chunk
  tree from those lists; v1: blake3 of its bytes), made durable;
- :func:`still_intact`: whether an installed link still holds what its layer describes.

Errors: DigestInvalid (naming layer, tag and file), DeclarationTooLarge (.limits), HubError, OSError.
"""

from __future__ import annotations

from pathlib import Path

from manifest import mediatypes as mt
from manifest.assemble import FileAssembler
from manifest.chunking import MIN_CHUNK_SIZE
from manifest.chunktree import ChunkList, apply_map
from manifest.errors import AssemblyError, DigestMismatch, ManifestError
from manifest.model import MAX_CHUNK_MAP_BYTES, ChunkMap, LayerConfig, LayerManifest

from ..install import fsync_path, settle_mtime
from ..snapdir import LocalSnapshot, read_hub_meta
from ..store import SnapshotStore
from .errors import DigestInvalid, HubError
from .limits import FILE_CHUNKS_ENV, ClientLimits, DeclarationTooLarge, check_files, check_map_entries
from .repository import ChainLink, RepositoryClient

__all__ = ["chunk_lists", "fetch_maps", "still_intact", "verify_files"]


def still_intact(store: SnapshotStore, snap: LocalSnapshot, config: LayerConfig) -> bool:
    """Whether an installed link still holds the files its layer describes (VerifiedRecord:
    no hashing unless a file changed since it was recorded; a v2 chunked file by the chunk tree
    its install recorded, else by blake3)."""
    meta = read_hub_meta(snap.dir)
    for role, info in config.files.items():
        path = snap.dir / role
        if not path.is_file():
            return False
        # v2 names a chunked file by its chunk tree: compare the blake3 that forkd-hub.json recorded
        # at install (not ``snap.files``, which prefers the verified record's digest of the file as
        # it is now, and so would vouch for a file changed since)
        recorded = meta.files.get(role) if meta is not None else None
        if config.version >= 2 and recorded is not None and recorded.chunk_tree is not None:
            # a v2 pull recorded the file's chunk tree: compare that (read only if the file changed)
            size, tree = recorded.chunk_tree
            if tree != info.digest or store.verified.chunk_tree(path, size) != tree:
                return False
            continue
        want = (
            info.digest
            if config.version < 2 or role not in mt.CHUNKED_FILES
            else (recorded.digest if recorded is not None else None)
        )
        if want is None or store.verified.digests(path, ("blake3",))["blake3"] != want:
            return False
    return True


def fetch_maps(
    repo: RepositoryClient, link: ChainLink, manifest: LayerManifest, config: LayerConfig
) -> dict[str, ChunkMap]:
    """A layer's chunk maps, each checked against its digest and the config; the config's declared
    sizes against the client's limits first, each body's entry count before it is parsed
    (:mod:`.limits`). Raises DigestInvalid, DeclarationTooLarge, HubError."""
    maps: dict[str, ChunkMap] = {}
    limits = ClientLimits.from_env()
    check_files(link.digest, config, limits)  # a caller that did not parse_link: nothing fetched yet
    for role, desc in manifest.chunk_maps.items():
        info = config.files.get(role)
        if info is None:
            raise DigestInvalid(f"layer {link.digest}: chunk map of {role} disagrees with the config")
        body = repo.get_blob(desc.digest, desc.size, limit=MAX_CHUNK_MAP_BYTES)
        check_map_entries(link.digest, role, body, -(-info.size // (info.chunk_size or MIN_CHUNK_SIZE)))
        try:
            maps[role] = ChunkMap.from_json(body)
        except ManifestError as e:
            raise HubError(f"layer {link.digest}: invalid chunk map for {role}: {e}") from None
        if info.digest != maps[role].digest or info.size != maps[role].size:
            raise DigestInvalid(f"layer {link.digest}: chunk map of {role} disagrees with the config")
        chunks = -(-maps[role].size // maps[role].chunk_size)
        if chunks > limits.file_chunks:  # format v1 configs may not declare a chunk size
            raise DeclarationTooLarge(
                link.digest, f"{role} chunks (chunk map)", chunks, limits.file_chunks, FILE_CHUNKS_ENV
            )
    return maps


def chunk_lists(parent: dict[str, ChunkList], maps: dict[str, ChunkMap]) -> dict[str, ChunkList]:
    """Format v2: each file's chunk list, from the parent's and the layer's map (O(chunks)).
    Raises DigestInvalid when a map cannot apply (a chunk size that changed)."""
    try:
        return {
            role: apply_map(parent.get(role), ((e.index, e.digest) for e in m.entries), m.size, m.chunk_size)
            for role, m in maps.items()
        }
    except (ValueError, IndexError) as e:
        raise DigestInvalid(f"a chunk map does not apply to its parent's file: {e}") from None


def verify_files(
    assemblers: dict[str, FileAssembler], vmstate: Path, layer: str, tag: str, lists: dict[str, ChunkList]
) -> dict[str, dict[str, str]]:
    """On the verifier thread: check each assembled file (v2: its chunk tree from ``lists``, read
    from nothing; v1: its whole-file blake3, kept for the local record), and make the link's files
    durable, their mtimes settled first (so installing them later writes nothing more).
    Returns {role: {algorithm: digest}} (empty for a v2 chunked file: its record is its chunk
    tree, see :meth:`.pull.ChainPull._install`); raises DigestInvalid (the files are removed)."""
    known: dict[str, dict[str, str]] = {}
    pending = dict(assemblers)
    try:
        for role, assembler in assemblers.items():
            assembler.wait_whole()  # its parent's bytes may still be going in around its chunks
            del pending[role]
            settle_mtime(assembler.out)
            chunk_list = lists.get(role)  # v2: the file is its chunk tree, nothing to read
            known[role] = assembler.finish(chunk_list=chunk_list, hash_file=chunk_list is None).digests
    except (DigestMismatch, AssemblyError) as e:
        raise DigestInvalid(f"layer {layer} ({tag}): {e}") from None
    finally:
        for assembler in pending.values():
            assembler.abort()
    settle_mtime(vmstate)
    fsync_path(vmstate)
    return known
