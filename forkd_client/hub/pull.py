"""``forkd pull``: fetch a chain from a hub, download only missing chunks, verify, install.

1. One request returns the chain base → head (manifests + configs, digests verified).
2. Links already installed from the same manifest are reused as they are.
3. For the others, chunk maps are fetched and verified; the chunks that are in neither the
   local chunk cache nor an already-assembled parent are fetched as coalesced byte ranges of
   data blobs (several ranges per request, requests in parallel), each frame verified against
   its chunk digest on arrival and kept in the chunk cache, which is what makes a killed pull
   resume without re-downloading.
4. Each file is assembled on a reflink/copy of the parent's file, its content digest checked,
   and the link installed atomically as a forkd-compatible snapshot whose ``parent_tag`` names
   its parent's local tag.

Errors: forkd_client.hub.errors (DigestInvalid names layer, file and chunk), ClientError, OSError.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import zstandard

from manifest import mediatypes as mt
from manifest.assemble import FileAssembler, decompress_chunk
from manifest.digest import digest_bytes
from manifest.errors import AssemblyError, DigestMismatch, ManifestError
from manifest.model import ChunkMap, LayerConfig, LayerManifest

from ..errors import SnapshotNotFound
from ..snapdir import LocalSnapshot
from ..store import SnapshotStore
from .client import ChainLink, HubClient
from .errors import DigestInvalid, DiskFull, HubError
from .localchunks import LocalChunkIndex
from .progress import NullProgress, Progress
from .reference import Reference

RANGE_GAP = 0  # frames of one layer are contiguous; only merge touching ranges
MAX_RANGE_BYTES = 8 << 20
PARALLEL_REQUESTS = 4


def _tunable(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit():
        raise HubError(f"{name}={raw!r} is not a whole number of bytes/requests")
    return max(minimum, int(raw))
_SAFE = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass
class LinkPulled:
    tag: str
    digest: str
    reused: bool
    chunks_fetched: int = 0
    chunks_cached: int = 0
    chunks_local: int = 0
    bytes_fetched: int = 0


@dataclass
class PullResult:
    reference: str
    digest: str
    tag: str
    links: list[LinkPulled] = field(default_factory=list)
    bytes_received: int = 0

    @property
    def up_to_date(self) -> bool:
        return all(link.reused for link in self.links)

    def to_obj(self) -> dict:
        return {"reference": self.reference, "digest": self.digest, "tag": self.tag, "up_to_date": self.up_to_date,
                "bytes_received": self.bytes_received, "links": [vars(link) for link in self.links]}


def local_tag_for(name: str) -> str:
    """A local tag from a hub name or tag: forkd's tag rules, at most 64 characters."""
    tag = _SAFE.sub("-", name).strip("-") or "snapshot"
    return tag[:64]


def pull(
    store: SnapshotStore,
    client: HubClient,
    ref: Reference,
    *,
    as_tag: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> PullResult:
    progress = progress or NullProgress()
    received_before = client.bytes_received
    chain = client.get_chain(ref.name, ref.ref)
    parsed = [_parse_link(link) for link in chain]
    _check_chain(client, ref, parsed)
    head_tag = as_tag or (local_tag_for(ref.repository) if (ref.tag or "latest") == "latest" and not ref.digest
                          else local_tag_for(f"{ref.repository}-{ref.tag or ref.digest.split(':')[1][:12]}"))  # type: ignore[union-attr]
    tags = _local_tags(store, parsed, head_tag)
    result = PullResult(str(ref), chain[-1].digest, head_tag)
    parent: LocalSnapshot | None = None
    index = LocalChunkIndex(store.root / "chunk-index.db", store.verified)
    try:
        for (link, manifest, config), tag in zip(parsed, tags):
            existing = _installed(store, tag, link.digest)
            if existing is not None:
                progress.log(f"{tag}: already present ({link.digest[:19]}…)")
                result.links.append(LinkPulled(tag, link.digest, reused=True))
                parent = existing
                continue
            is_head = link is parsed[-1][0]
            result.links.append(_pull_link(store, client, index, ref, link, manifest, config, tag, parent, force,
                                           progress, is_head=is_head))
            parent = store.get(tag)
    finally:
        index.close()
    result.bytes_received = client.bytes_received - received_before
    return result


def _parse_link(link: ChainLink) -> tuple[ChainLink, LayerManifest, LayerConfig]:
    try:
        manifest = LayerManifest.from_json(link.manifest)
        if str(digest_bytes(link.config, manifest.config.digest.split(":")[0])) != manifest.config.digest:
            raise DigestInvalid(f"layer {link.digest}: config does not match its digest {manifest.config.digest}")
        return link, manifest, LayerConfig.from_json(link.config)
    except ManifestError as e:
        raise HubError(f"layer {link.digest} is not a valid forkd snapshot layer: {e}") from None


def _check_chain(client: HubClient, ref: Reference, parsed: list) -> None:
    """The hub's chain must be one: each config names the link below it as its parent, the base
    none, and a pinned digest must be the head (or a chain index listing exactly these links).
    Then every installed byte hangs off the head's digest. Raises DigestInvalid."""
    for i, (link, _, config) in enumerate(parsed):
        below = parsed[i - 1][0].digest if i else None
        named = config.parent.digest if config.parent else None
        if named != below:
            raise DigestInvalid(f"layer {link.digest}: its config names parent {named}, "
                                f"but the hub's chain puts {below} below it")
    digests = [link.digest for link, _, _ in parsed]
    if ref.digest and digests[-1] != ref.digest:
        data, _ = client.get_manifest(ref.name, ref.digest)  # verified against the pinned digest
        try:
            listed = [m["digest"] for m in json.loads(data)["manifests"]]
        except (ValueError, KeyError, TypeError):
            listed = None
        if listed != digests:
            raise DigestInvalid(f"{ref}: the hub answered with the chain of {digests[-1]}, which {ref.digest} does not name")


def _repository_of(link: ChainLink, ref: Reference) -> str:
    if link.repository == ref.name:
        return ref.name
    try:
        other = Reference.parse(link.repository)
    except HubError:
        raise HubError(f"the hub names an invalid repository {link.repository!r} for layer {link.digest}") from None
    return other.name


def _installed(store: SnapshotStore, tag: str, digest: str) -> LocalSnapshot | None:
    try:
        snap = store.get(tag)
    except SnapshotNotFound:
        return None
    return snap if (snap.origin or {}).get("manifest_digest") == digest else None


def _local_tags(store: SnapshotStore, parsed: list, head_tag: str) -> list[str]:
    """Local tags base → head: the head gets ``head_tag``; a parent gets the tag its child's config
    names, or that tag plus a digest suffix when a different snapshot already uses it."""
    tags = [head_tag]
    for i in range(len(parsed) - 1, 0, -1):
        child_config = parsed[i][2]
        parent_digest = parsed[i - 1][0].digest
        wanted = local_tag_for(child_config.parent.tag if child_config.parent and child_config.parent.tag else "layer")
        if store.exists(wanted) and _installed(store, wanted, parent_digest) is None or wanted in tags:
            wanted = local_tag_for(f"{wanted[:50]}-{parent_digest.split(':')[1][:12]}")
        tags.append(wanted)
    return list(reversed(tags))


def _pull_link(store: SnapshotStore, client: HubClient, index: LocalChunkIndex, ref: Reference, link: ChainLink, manifest: LayerManifest,
               config: LayerConfig, tag: str, parent: LocalSnapshot | None, force: bool, progress: Progress,
               *, is_head: bool = False) -> LinkPulled:
    """Fetch, assemble, verify and install one link. sha256 (what forkd's ``parent_content_hash``
    needs) is computed for links that are parents here; the head's is left to the verified-content
    record, computed the first time something needs it (a child, a pack, a push)."""
    # A link's blobs live in the repository the hub names for it (a parent pushed elsewhere or
    # force-deleted here); it must be a well-formed name, and access is the hub's to check.
    name = _repository_of(link, ref)
    maps: dict[str, ChunkMap] = {}
    for role, desc in manifest.chunk_maps.items():
        try:
            maps[role] = ChunkMap.from_json(client.get_blob(name, desc.digest, desc.size))
        except ManifestError as e:
            raise HubError(f"layer {link.digest}: invalid chunk map for {role}: {e}") from None
        info = config.files.get(role)
        if info is None or info.digest != maps[role].digest or info.size != maps[role].size:
            raise DigestInvalid(f"layer {link.digest}: chunk map of {role} disagrees with the config")
    stats = LinkPulled(tag, link.digest, reused=False)
    vm_frame = client.get_blob(name, manifest.vmstate.digest, manifest.vmstate.size)
    vm_info = config.files[mt.VMSTATE_FILE]
    try:
        vmstate = zstandard.ZstdDecompressor().decompress(vm_frame, max_output_size=vm_info.size)
    except zstandard.ZstdError as e:
        raise DigestInvalid(f"layer {link.digest}: vmstate blob is not valid zstd: {e}") from None
    if str(digest_bytes(vmstate)) != vm_info.digest:
        raise DigestInvalid(f"layer {link.digest}: vmstate does not match its digest {vm_info.digest}")

    _check_space(store, maps, parent, link.digest)
    with store.staging(f"pull-{tag}") as staged:
        assemblers: dict[str, FileAssembler] = {}
        try:
            for role, chunk_map in maps.items():
                parent_file = parent.dir / role if parent is not None and (parent.dir / role).is_file() else None
                if chunk_map.parent_digest is not None and parent_file is None:
                    raise HubError(f"layer {link.digest}: {role} applies to a parent file this chain does not have")
                assemblers[role] = FileAssembler(chunk_map, staged / role, parent=parent_file)
            _fill(store, client, index, name, link.digest, maps, assemblers, stats, progress, tag)
            known: dict[str, dict[str, str]] = {}
            for role, assembler in assemblers.items():
                try:
                    done = assembler.finish(extra_algorithms=() if is_head else ("sha256",))
                except (DigestMismatch, AssemblyError) as e:
                    raise DigestInvalid(f"layer {link.digest} ({tag}): {e}") from None
                if "sha256" in done.digests and config.files[role].sha256 and done.digests["sha256"] != config.files[role].sha256:
                    raise DigestInvalid(f"layer {link.digest} ({tag}): {role} sha256 differs from the config")
                known[role] = done.digests
        except BaseException:
            for assembler in assemblers.values():
                assembler.abort()
            raise
        (staged / mt.VMSTATE_FILE).write_bytes(vmstate)
        # record only digests computed here over these bytes, never the config's claims
        known[mt.VMSTATE_FILE] = {"blake3": vm_info.digest, "sha256": str(digest_bytes(vmstate, "sha256"))}
        parent_sha = None
        if parent is not None:
            parent_sha = store.memory_sha256(parent.tag)
        store.prepare(
            staged, tag, parent=parent.tag if parent else None, parent_content_hash=parent_sha,
            compat=config.compat, annotations=config.annotations, created=config.created,
            origin={"hub": client.base_url, "reference": f"{name}@{link.digest}", "manifest_digest": link.digest},
            known_digests=known, snapshot_json={"volumes": []},
            algorithms=("blake3",) if is_head else ("blake3", "sha256"),
        )
        store.commit([(staged, tag)], force=force)
    _index_and_prune(store, index, tag, maps)
    progress.log(f"{tag}: installed ({stats.chunks_fetched} chunks fetched, {stats.chunks_cached} from cache)")
    return stats


def _check_space(store: SnapshotStore, maps: dict[str, ChunkMap], parent: LocalSnapshot | None, layer: str) -> None:
    """Refuse up front when the link cannot fit: its changed chunks, plus a full copy of the
    parent's allocated bytes where the filesystem cannot reflink (counted pessimistically)."""
    need = sum(min(m.chunk_size, m.size - e.index * m.chunk_size) for m in maps.values() for e in m.entries
               if not e.is_zero)
    if parent is not None:
        need += sum((parent.dir / role).stat().st_blocks * 512 for role in maps if (parent.dir / role).is_file())
    st = os.statvfs(store.root)
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise DiskFull(f"not enough disk space for layer {layer} under {store.root}: it may need "
                       f"{need / 2**20:,.0f} MiB (changed chunks, plus a copy of the parent where the filesystem "
                       f"cannot reflink), {free / 2**20:,.0f} MiB free")


def _index_and_prune(store: SnapshotStore, index: LocalChunkIndex, tag: str, maps: dict[str, ChunkMap]) -> None:
    """The link's chunks now live in its installed files: index them there and drop their cached
    frames, so the chunk cache only holds what an unfinished pull has fetched."""
    for role, chunk_map in maps.items():
        cs = chunk_map.chunk_size
        entries = [e for e in chunk_map.entries if not e.is_zero]
        index.add(store.path(tag) / role,
                  ((e.digest, e.index * cs, min(cs, chunk_map.size - e.index * cs)) for e in entries))  # type: ignore[misc]
    store.chunks.remove_many(e.digest for chunk_map in maps.values() for e in chunk_map.entries  # type: ignore[misc]
                             if not e.is_zero)


def _fill(store: SnapshotStore, client: HubClient, index: LocalChunkIndex, name: str, layer: str,
          maps: dict[str, ChunkMap], assemblers: dict[str, FileAssembler], stats: LinkPulled,
          progress: Progress, tag: str) -> None:
    """Write every changed chunk of the link into its file: from the chunk cache (a resumed pull),
    from local snapshots holding the same content, else fetched from the hub. Each chunk is
    verified once, on arrival, and written straight into place; fetched frames are also kept in
    the chunk cache until the link is installed, so a killed pull resumes without them."""
    cache = store.chunks
    # where each distinct chunk frame goes: (role, index) destinations, its length and digest
    wanted: dict[str, dict[int, tuple[int, str, int, list[tuple[str, int]]]]] = {}
    for role, chunk_map in maps.items():
        assembler = assemblers[role]
        for e in chunk_map.entries:
            if e.is_zero:
                continue
            length = assembler.length(e.index)
            blob = chunk_map.blobs[e.blob]
            slot = wanted.get(blob, {}).get(e.offset)
            if slot is not None:  # the same frame at several places of this layer
                slot[3].append((role, e.index))
                continue
            data = _from_cache(cache, e.digest, e.length, length)  # type: ignore[arg-type]
            if data is not None:
                stats.chunks_cached += 1
            else:
                data = index.read(e.digest)  # type: ignore[arg-type]
                if data is not None and len(data) == length:
                    stats.chunks_local += 1
                else:
                    wanted.setdefault(blob, {})[e.offset] = (e.length, e.digest, length, [(role, e.index)])  # type: ignore[arg-type]
                    continue
            assembler.write(e.index, data)
    # FORKD_PULL_RANGE_BYTES bounds one coalesced range (a killed pull loses at most the ranges in
    # flight); FORKD_PULL_PARALLEL is the number of concurrent requests.
    max_range = _tunable("FORKD_PULL_RANGE_BYTES", MAX_RANGE_BYTES, 64 << 10)
    parallel = _tunable("FORKD_PULL_PARALLEL", PARALLEL_REQUESTS, 1)
    requests = _coalesce(wanted, max_range)
    progress.task(f"pull {tag}", sum(f[0] for frames in wanted.values() for f in frames.values()))
    pack = "pull-" + layer.split(":")[-1][:16]

    def fetch(request: tuple[str, list[tuple[int, int]]]) -> tuple[int, int]:
        blob, ranges = request
        verified: list[tuple[str, bytes, int]] = []
        for (start, size), data in zip(ranges, client.read_ranges(name, blob, ranges)):
            for offset in sorted(o for o in wanted[blob] if start <= o < start + size):
                flen, digest, length, places = wanted[blob][offset]
                frame = data[offset - start : offset - start + flen]
                role, first = places[0]
                try:
                    chunk = decompress_chunk(frame, length, digest, f"{role} chunk {first} ({digest})")
                except (DigestMismatch, AssemblyError, ManifestError) as e:
                    raise DigestInvalid(f"layer {layer} ({tag}): {role} chunk {first} ({digest}) from blob {blob} "
                                        f"at offset {offset} is corrupt: {e}") from None
                for where, at in places:
                    assemblers[where].write(at, chunk)
                verified.append((digest, frame, length))
        cache.put_frames(verified, pack=pack, verify=False)  # one append + one transaction per response
        nbytes = sum(len(f) for _, f, _ in verified)
        progress.advance(nbytes)
        return len(verified), nbytes

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for count, nbytes in pool.map(fetch, requests):
            stats.chunks_fetched += count
            stats.bytes_fetched += nbytes


def _from_cache(cache, digest: str, frame_length: int, length: int) -> bytes | None:
    """The chunk's bytes from a frame the cache still holds intact, else None (its pack may have
    been pruned or overwritten by another process: then it is dropped and fetched again)."""
    if not cache.has(digest):
        return None
    frame = cache.get_frame(digest)
    if frame is not None and len(frame) == frame_length:
        try:
            return decompress_chunk(frame, length, digest, f"cached chunk {digest}")
        except (DigestMismatch, AssemblyError, ManifestError):
            pass
    cache.remove(digest)
    return None


def _coalesce(wanted: dict[str, dict[int, tuple]], max_range: int) -> list[tuple[str, list[tuple[int, int]]]]:
    """Merge touching frames of each blob into ranges of at most ``max_range`` bytes, and group
    up to 64 ranges (and about ``max_range`` bytes) per request."""
    requests = []
    for blob, frames in wanted.items():
        current: list[tuple[int, int]] = []
        for offset in sorted(frames):
            n = frames[offset][0]
            if current and current[-1][0] + current[-1][1] + RANGE_GAP >= offset and current[-1][1] + n <= max_range:
                start, _ = current[-1]
                current[-1] = (start, offset + n - start)
            else:
                current.append((offset, n))
        for i in range(0, len(current), 64):
            batch: list[tuple[int, int]] = []
            for r in current[i : i + 64]:
                if batch and sum(n for _, n in batch) + r[1] > max_range:
                    requests.append((blob, batch))
                    batch = []
                batch.append(r)
            requests.append((blob, batch))
    return requests


__all__ = ["PullResult", "LinkPulled", "pull", "local_tag_for"]
