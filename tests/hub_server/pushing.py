"""A tiny push/pull client for tests: speaks the hub's HTTP API through any ``httpx.Client``.

In-process tests pass Litestar's ``TestClient(app)`` (an ``httpx.Client``); end-to-end tests
pass an ``httpx.Client`` pointed at a real ``forkd-hub serve``. Layers are built with the real
``manifest`` API (diff_files → LayerBuilder → ChunkMap / LayerConfig / LayerManifest), pushed
link by link as docs/http-api.md "Push, step by step" says, and pulled back by fetching the
chain and assembling each file from ranged (multi-range) blob reads.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import zstandard

from manifest import mediatypes as mt
from manifest.assemble import assemble_file
from manifest.chunktree import file_chunk_tree
from manifest.diff import diff_files
from manifest.digest import digest_bytes, digest_file
from manifest.layer import DataBlob, LayerBuilder
from manifest.model import ChunkMap, Descriptor, FileInfo, LayerConfig, LayerManifest, ParentRef
from tests.manifest.images import mutate_image, random_image

CHUNK = 64 * 1024
MiB = 1 << 20
CREATED = "2026-01-01T00:00:00Z"  # fixed, so identical layers have identical bytes
PATCH_SIZE = 256 * 1024
MAX_RANGES = 64


class HubRequestError(AssertionError):
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        request = response.request
        super().__init__(f"{request.method} {request.url} → {response.status_code}: {response.text[:500]}")


def auth(token: str) -> dict[str, str]:
    """The ``Authorization`` header for a token."""
    return {"Authorization": f"Bearer {token}"}


def check(response: httpx.Response, *ok: int) -> httpx.Response:
    if response.status_code not in ok:
        raise HubRequestError(response)
    return response


def expect_error(response: httpx.Response, status: int, code: str) -> dict:
    """Assert ``response`` is the error envelope with one error ``code``; return its detail."""
    assert response.status_code == status, (response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"errors"} and len(body["errors"]) == 1, body
    error = body["errors"][0]
    assert set(error) == {"code", "message", "detail"}, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["detail"], dict)
    return error["detail"]


@dataclass
class BuiltLayer:
    """A layer ready to push: exact bytes of every document and where its data blobs are."""

    manifest: bytes
    digest: str
    config: bytes
    chunk_map: ChunkMap
    chunk_map_bytes: bytes
    vmstate_blob: bytes
    data_blobs: dict[str, Path]
    frames: dict[str, DataBlob]
    memory: Path
    vmstate: bytes
    new_chunks: int

    def rebuild(
        self,
        *,
        chunk_map: ChunkMap | None = None,
        config: bytes | None = None,
        data_blobs: dict[str, Path] | None = None,
    ) -> BuiltLayer:
        """The same layer with some documents replaced; the manifest is rebuilt to match."""
        chunk_map = chunk_map or self.chunk_map
        chunk_map_bytes = chunk_map.to_json()
        config = config if config is not None else self.config
        data_blobs = self.data_blobs if data_blobs is None else data_blobs
        sizes = {d: p.stat().st_size for d, p in data_blobs.items()}
        layers = [
            Descriptor.for_bytes(mt.VMSTATE, self.vmstate_blob),
            Descriptor.for_bytes(mt.CHUNK_MAP, chunk_map_bytes, **{mt.ANNOTATION_FILE: mt.MEMORY_FILE}),
        ]
        layers += [Descriptor(mt.DATA_BLOB, b, sizes[b]) for b in chunk_map.blobs]
        manifest = LayerManifest(Descriptor.for_bytes(mt.CONFIG, config), tuple(layers)).to_json()
        return replace(
            self,
            manifest=manifest,
            digest=str(digest_bytes(manifest, "sha256")),
            config=config,
            chunk_map=chunk_map,
            chunk_map_bytes=chunk_map_bytes,
            data_blobs=data_blobs,
        )

    @property
    def small_blobs(self) -> dict[str, bytes]:
        return {
            str(digest_bytes(self.config, "sha256")): self.config,
            str(digest_bytes(self.chunk_map_bytes, "sha256")): self.chunk_map_bytes,
            str(digest_bytes(self.vmstate_blob, "sha256")): self.vmstate_blob,
        }


@dataclass
class Transfer:
    """What a push actually sent."""

    blobs_uploaded: list[str] = field(default_factory=list)
    bytes_uploaded: int = 0
    blobs_mounted: list[str] = field(default_factory=list)
    frames_uploaded: int = 0
    frames_referenced: int = 0


class PushClient:
    def __init__(self, http: httpx.Client, token: str | None = None) -> None:
        self.http = http
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.transfer = Transfer()

    # -- negotiation and blobs ------------------------------------------------------------

    def query_frames(self, repo: str, digests: list[str]) -> dict[str, dict]:
        found: dict[str, dict] = {}
        for i in range(0, len(digests), 10_000):
            r = check(
                self.http.post(
                    f"/api/v1/repositories/{repo}/frames/query",
                    json={"digests": digests[i : i + 10_000]},
                    headers=self.headers,
                ),
                200,
            )
            found.update(r.json()["found"])
        return found

    def push_recipe(self, repo: str, blob: DataBlob, *, inline_all: bool = False) -> httpx.Response:
        """Upload the frames of ``blob`` the hub lacks (all with ``inline_all``), then finish with its recipe."""
        found = {} if inline_all else self.query_frames(repo, [f.digest for f in blob.frames])
        data = blob.path.read_bytes()
        location = check(self.http.post(f"/v2/{repo}/blobs/uploads/", headers=self.headers), 202).headers["Location"]
        inline = [f for f in blob.frames if f.digest not in found]
        payload = b"".join(data[f.offset : f.offset + f.length] for f in inline)
        if payload:
            check(
                self.http.patch(
                    location,
                    content=payload,
                    headers={
                        **self.headers,
                        "Content-Range": f"0-{len(payload) - 1}",
                        "Content-Type": "application/octet-stream",
                    },
                ),
                202,
            )
        recipe = {
            "mediaType": mt.RECIPE,
            "digest": blob.digest,
            "size": blob.size,
            "frames": [[f.digest, f.chunk, f.raw_length, f.length, f.digest not in found] for f in blob.frames],
        }
        uuid = location.rstrip("/").rsplit("/", 1)[-1]
        r = self.http.post(
            f"/api/v1/repositories/{repo}/blobs/uploads/{uuid}/recipe", json=recipe, headers=self.headers
        )
        if r.status_code == 201:
            self.transfer.blobs_uploaded.append(blob.digest)
            self.transfer.bytes_uploaded += len(payload)
            self.transfer.frames_uploaded += len(inline)
            self.transfer.frames_referenced += len(blob.frames) - len(inline)
        return r

    def blob_exists(self, repo: str, digest: str) -> bool:
        return self.http.head(f"/v2/{repo}/blobs/{digest}", headers=self.headers).status_code == 200

    def upload(self, repo: str, data: bytes, digest: str, *, mount_from: str | None = None) -> None:
        """Upload with POST + PATCHes (Content-Range) + PUT ?digest=, or mount it from ``mount_from``."""
        if mount_from:
            r = check(
                self.http.post(
                    f"/v2/{repo}/blobs/uploads/", params={"mount": digest, "from": mount_from}, headers=self.headers
                ),
                201,
                202,
            )
            if r.status_code == 201:
                self.transfer.blobs_mounted.append(digest)
                return
            location = r.headers["Location"]
        else:
            r = check(self.http.post(f"/v2/{repo}/blobs/uploads/", headers=self.headers), 202)
            location = r.headers["Location"]
        offset = 0
        while offset < len(data):
            piece = data[offset : offset + PATCH_SIZE]
            r = check(
                self.http.patch(
                    location,
                    content=piece,
                    headers={
                        **self.headers,
                        "Content-Range": f"{offset}-{offset + len(piece) - 1}",
                        "Content-Type": "application/octet-stream",
                    },
                ),
                202,
            )
            offset += len(piece)
            assert r.headers["Upload-Offset"] == str(offset)
        check(self.http.put(location, params={"digest": digest}, headers=self.headers), 201)
        self.transfer.blobs_uploaded.append(digest)
        self.transfer.bytes_uploaded += len(data)

    def ensure_blob(self, repo: str, data: bytes, digest: str, *, mount_from: str | None = None) -> None:
        if not self.blob_exists(repo, digest):
            self.upload(repo, data, digest, mount_from=mount_from)

    # -- layers -----------------------------------------------------------------------------

    def build_layer(
        self, repo: str, memory: Path, vmstate: bytes, workdir: Path, parent: BuiltLayer | None = None
    ) -> BuiltLayer:
        """Diff ``memory`` against the parent's: the layer is a function of the files alone (format v2)."""
        parent_memory = parent.memory if parent else None
        changes = list(diff_files(parent_memory, memory, CHUNK))
        sizes: dict[str, int] = {}
        blob_dir = workdir / "blobs"
        builder = LayerBuilder(blob_dir)
        memory_digest = file_chunk_tree(memory, CHUNK)
        builder.add_file(
            mt.MEMORY_FILE,
            iter(changes),
            size=os.path.getsize(memory),
            chunk_size=CHUNK,
            digest=memory_digest,
            parent_digest=file_chunk_tree(parent_memory, CHUNK) if parent_memory else None,
        )
        maps, new_blobs = builder.finish()
        chunk_map = maps[mt.MEMORY_FILE]
        chunk_map_bytes = chunk_map.to_json()
        vmstate_blob = zstandard.ZstdCompressor(write_content_size=True).compress(vmstate)
        config = LayerConfig(
            created=CREATED,
            files={
                mt.VMSTATE_FILE: FileInfo(
                    len(vmstate), str(digest_bytes(vmstate)), str(digest_bytes(vmstate, "sha256"))
                ),
                mt.MEMORY_FILE: FileInfo(
                    os.path.getsize(memory), memory_digest, str(digest_file(memory, ("sha256",))["sha256"]), CHUNK
                ),
            },
            parent=ParentRef(parent.digest, None) if parent else None,
            compat={"vmm": "qemu-microvm", "memMiB": 4},
        ).to_json()
        data_blobs = {b.digest: b.path for b in new_blobs}
        sizes.update({b.digest: b.size for b in new_blobs})
        layers = [
            Descriptor.for_bytes(mt.VMSTATE, vmstate_blob),
            Descriptor.for_bytes(mt.CHUNK_MAP, chunk_map_bytes, **{mt.ANNOTATION_FILE: mt.MEMORY_FILE}),
        ]
        layers += [Descriptor(mt.DATA_BLOB, b, sizes[b]) for b in chunk_map.blobs]
        manifest = LayerManifest(Descriptor.for_bytes(mt.CONFIG, config), tuple(layers)).to_json()
        return BuiltLayer(
            manifest,
            str(digest_bytes(manifest, "sha256")),
            config,
            chunk_map,
            chunk_map_bytes,
            vmstate_blob,
            data_blobs,
            {b.digest: b for b in new_blobs},
            memory,
            vmstate,
            builder.stats.new_chunks,
        )

    def push_layer(
        self,
        repo: str,
        layer: BuiltLayer,
        tag: str | None = None,
        *,
        public: bool = False,
        mount_from: str | None = None,
        recipes: bool = True,
    ) -> httpx.Response | None:
        """Upload what the hub lacks (data blobs as recipes over frames, or whole with ``recipes=False``),
        PUT the manifest by digest, then by tag (returns the last PUT)."""
        r = None
        exists = self.http.get(f"/v2/{repo}/manifests/{layer.digest}", headers=self.headers).status_code == 200
        if not exists:
            for digest, path in layer.data_blobs.items():
                if self.blob_exists(repo, digest):
                    continue
                if recipes:
                    check(self.push_recipe(repo, layer.frames[digest]), 201)
                else:
                    self.upload(repo, path.read_bytes(), digest)
            for digest, data in layer.small_blobs.items():
                self.ensure_blob(repo, data, digest, mount_from=mount_from)
            r = self.put_manifest(repo, layer.digest, layer.manifest, public=public)
        if tag is not None:
            r = self.put_manifest(repo, tag, layer.manifest, public=public)
        return r

    def put_manifest(
        self, repo: str, ref: str, body: bytes, *, public: bool = False, media_type: str = mt.OCI_MANIFEST
    ) -> httpx.Response:
        return check(
            self.http.put(
                f"/v2/{repo}/manifests/{ref}",
                content=body,
                params={"public": "true"} if public else None,
                headers={**self.headers, "Content-Type": media_type},
            ),
            201,
        )

    def push_chain(
        self, repo: str, images: list[tuple[Path, bytes]], workdir: Path, tag: str, *, public: bool = False
    ) -> list[BuiltLayer]:
        """Build and push ``[(memory, vmstate), …]`` base → head; only the head gets ``tag``."""
        layers: list[BuiltLayer] = []
        for i, (memory, vmstate) in enumerate(images):
            layer = self.build_layer(repo, memory, vmstate, workdir / f"link{i}", layers[-1] if layers else None)
            self.push_layer(repo, layer, tag if i == len(images) - 1 else None, public=public)
            layers.append(layer)
        return layers

    # -- pulling ----------------------------------------------------------------------------

    def pull(self, repo: str, ref: str, dest: Path) -> list[tuple[Path, bytes]]:
        """Fetch the chain of ``ref`` and assemble every link; return ``[(memory path, vmstate)]`` base → head."""
        chain = check(self.http.get(f"/api/v1/repositories/{repo}/chain/{ref}", headers=self.headers), 200).json()
        dest.mkdir(parents=True, exist_ok=True)
        out: list[tuple[Path, bytes]] = []
        parent: Path | None = None
        for i, link in enumerate(chain["chain"]):
            raw = link["manifest"].encode()
            assert str(digest_bytes(raw, "sha256")) == link["digest"], "manifest bytes must be exact"
            manifest = LayerManifest.from_json(raw)
            source = link["repository"]
            cm_desc = manifest.chunk_maps[mt.MEMORY_FILE]
            chunk_map = ChunkMap.from_json(self.blob(source, cm_desc.digest))
            frames = self.prefetch_frames(source, chunk_map)
            target = dest / f"memory-{i}.bin"
            assemble_file(chunk_map, target, parent=parent, frames=lambda b, o, n, f=frames: f[(b, o, n)])
            vmstate = zstandard.ZstdDecompressor().decompress(self.blob(source, manifest.vmstate.digest))
            out.append((target, vmstate))
            parent = target
        return out

    def blob(self, repo: str, digest: str) -> bytes:
        data = check(self.http.get(f"/v2/{repo}/blobs/{digest}", headers=self.headers), 200).content
        assert str(digest_bytes(data, digest.split(":")[0])) == digest
        return data

    def prefetch_frames(self, repo: str, chunk_map: ChunkMap) -> dict[tuple[str, int, int], bytes]:
        """Every frame the map needs, fetched as multi-range GETs (≤ MAX_RANGES per request)."""
        wanted: dict[str, set[tuple[int, int]]] = {}
        for e in chunk_map.entries:
            if e.digest is not None:
                wanted.setdefault(chunk_map.blobs[e.blob], set()).add((e.offset, e.length))
        frames: dict[tuple[str, int, int], bytes] = {}
        for blob, spans in wanted.items():
            ordered = sorted(spans)
            for i in range(0, len(ordered), MAX_RANGES):
                batch = ordered[i : i + MAX_RANGES]
                for (offset, length), data in zip(batch, self.read_ranges(repo, blob, batch), strict=True):
                    frames[(blob, offset, length)] = data
        return frames

    def read_ranges(self, repo: str, blob: str, spans: list[tuple[int, int]]) -> list[bytes]:
        header = "bytes=" + ",".join(f"{o}-{o + n - 1}" for o, n in spans)
        r = check(self.http.get(f"/v2/{repo}/blobs/{blob}", headers={**self.headers, "Range": header}), 206)
        if len(spans) == 1:
            return [r.content]
        parts = parse_byteranges(r.headers["Content-Type"], r.content)
        by_start = {start: data for start, _, data in parts}
        return [by_start[o] for o, _ in spans]


def chain_images(directory: Path, seed: int = 1234) -> list[tuple[Path, bytes]]:
    """A 3-link chain of small sparse memory images (4-5 MiB) with vmstates: base, child, grandchild."""
    rng = random.Random(seed)
    base = random_image(directory / "m0.bin", rng, 4 * MiB, n_extents=10)
    child = mutate_image(base, directory / "m1.bin", rng, n_writes=5)
    grandchild = mutate_image(child, directory / "m2.bin", rng, new_size=5 * MiB, n_writes=5)
    return [(base, b"vmstate-0" * 100), (child, b"vmstate-1" * 100), (grandchild, b"vmstate-2" * 100)]


_BOUNDARY = re.compile(r'boundary="?([^";]+)"?')


def parse_byteranges(content_type: str, body: bytes) -> list[tuple[int, int, bytes]]:
    """Parse a ``multipart/byteranges`` body into ``[(first, last, data)]`` (by its Content-Range headers)."""
    assert content_type.startswith("multipart/byteranges"), content_type
    match = _BOUNDARY.search(content_type)
    assert match, content_type
    delimiter = b"--" + match.group(1).encode()
    parts: list[tuple[int, int, bytes]] = []
    position = body.index(delimiter)
    while True:
        position += len(delimiter)
        if body[position : position + 2] == b"--":
            return parts
        head_end = body.index(b"\r\n\r\n", position)
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (
                line.partition(":") for line in body[position:head_end].decode("latin-1").split("\r\n") if line
            )
        }
        first, last = (int(x) for x in headers["content-range"].split()[1].split("/")[0].split("-"))
        start = head_end + 4
        parts.append((first, last, body[start : start + last - first + 1]))
        position = start + last - first + 1 + 2  # data, then CRLF before the next delimiter
        assert body[position : position + len(delimiter)] == delimiter


async def damage_stored_byte(ctx, blob: str, offset: int) -> None:
    """Flip the stored byte that is byte ``offset`` of data blob ``blob`` (in its pack, or its object)."""
    from sqlmodel import select

    from hub_server.db.models import Frame, RecipeFrame
    from hub_server.registry.core.paths import blob_key

    async with ctx.sessions() as session:
        row = (
            await session.exec(
                select(RecipeFrame.offset, Frame.pack_key, Frame.pack_offset)
                .join(Frame, Frame.digest == RecipeFrame.frame_digest)
                .where(RecipeFrame.blob_digest == blob, RecipeFrame.offset <= offset)
                .order_by(RecipeFrame.offset.desc())
                .limit(1)
            )
        ).first()
    key, at = (blob_key(blob), offset) if row is None else (row[1], row[2] + offset - row[0])
    data = bytearray(await ctx.store.read(key))
    data[at] ^= 0xFF
    await ctx.store.put(key, bytes(data))
