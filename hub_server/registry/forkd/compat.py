"""forkd interoperability: a ``registry.json`` of public repositories and forkd packs built from stored layers.

An unmodified forkd client runs ``forkd pull --hub <hub>/registry.json owner/name[@version]``:
it reads ``packages["owner/name"].versions[version or "latest"]``, downloads ``url``, checks
``sha256`` (when given) over the downloaded bytes and unpacks the pack
(/work/shared/reference/forkd-formats.md §3–4). So:

- :meth:`ForkdCompatService.registry_json` lists every **public** repository with at least one
  tag, each tag a version whose ``url`` is ``<base>/packs/<ns>/<repo>/@<digest>.forkd-snapshot.tar.zst``
  (the manifest the tag names when listed: immutable, so the listed ``sha256`` stays true when the tag moves).
  forkd needs a ``latest`` version: a repository without a ``latest`` tag gets one copied from
  its most recently updated tag. A version is never listed without ``sha256``/``size_bytes``
  (forkd's ``pull`` skips its integrity check when ``sha256`` is missing): a pack is built when a
  tag push names its manifest (:meth:`ForkdCompatService.build_after_push`, in the background), and a
  tag whose pack is not built yet when listed is built first (once per manifest, cached); one whose
  pack cannot be built (too large, damaged content) is left out, logged.
- :meth:`ForkdCompatService.pack` builds the pack of a tag (or ``@digest``) once per
  repository and head manifest (v1 for a lone base, v2 for a chain root → head, see
  :mod:`packbuild`), stores it under ``forkd-packs/…`` (``registry/core/paths.py``) with its sha256,
  and serves it from there ever after, so the sha256 a registry.json published stays true.
  The pack's bytes depend only on the stored chain and the repository's name: link names
  come from the configs' parent tags (:func:`link_names`), times from the configs' ``created``.
  Builds are bounded (``max_pack_bytes``, :data:`MAX_CONCURRENT_BUILDS` at once), single-flight
  (one per pack in a process) and cached, failures too: a build that fails on damaged content
  marks the pack (:mod:`registry.damage`) and later requests are refused from the mark at once.
- Reads follow pull rules: a private repository the caller cannot read is 404 ``NAME_UNKNOWN``.

Errors: ``HubError`` — ``NAME_INVALID``/``NAME_UNKNOWN``/``MANIFEST_UNKNOWN``/``DIGEST_INVALID``
(the reference), ``TOO_LARGE`` (the pack would exceed ``max_pack_bytes``), ``INTERNAL`` with a
message naming the file and chunk (stored content does not match its digests: no pack is stored,
the damage is marked), ``UNAVAILABLE`` (no space to build); storage errors (``StorageUnavailable``,
``StorageFull``).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import re
import shutil
import tempfile
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.scopes import Principal
from hub_server.db.models import (
    BlobRole,
    Manifest,
    ManifestBlob,
    Repository,
    RepositoryManifest,
    Tag,
)
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.content.damage import find_mark, mark
from hub_server.registry.core.access import RepositoryScope, find_repository, scope_of
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.core.paths import (
    FORKD_PACK_SUFFIX,
    FORKD_PACKS_PREFIX,
    blob_key,
    forkd_pack_info_key,
    forkd_pack_key,
)
from hub_server.registry.core.sql import batched
from hub_server.registry.forkd.packbuild import BuiltPack, LinkDigestMismatch, LinkSource, StoreFrames, build_pack
from hub_server.registry.read.lineage import ChainLink, LineageService
from hub_server.storage import BlobNotFound, InvalidRange
from manifest import mediatypes as mt
from manifest.digest import Digest
from manifest.errors import ManifestError
from manifest.forkd_pack import PackTooLarge
from manifest.model import ChunkMap, LayerConfig, LayerManifest

__all__ = [
    "MAX_PACK_BYTES",
    "PACK_SUFFIX",
    "ForkdCompatService",
    "PackDownload",
    "forkd_time",
    "link_names",
    "pack_info_key",
    "pack_key",
]

log = logging.getLogger(__name__)

# the keys live in registry/core/paths.py; these names stay for the routes and tests that use them
PACKS_PREFIX, PACK_SUFFIX = FORKD_PACKS_PREFIX, FORKD_PACK_SUFFIX
pack_key, pack_info_key = forkd_pack_key, forkd_pack_info_key
#: Largest pack (sum of the uncompressed files of every link) built; the settings have no knob yet.
MAX_PACK_BYTES = 64 << 30
#: Packs built at once; each holds every link's files on disk while it is written.
MAX_CONCURRENT_BUILDS = 2
LATEST = "latest"
EPOCH = "1970-01-01T00:00:00Z"
_MiB = 1 << 20
_UPLOAD_PIECE = 4 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def forkd_time(created: str) -> str:
    """A config's ``created`` as forkd writes times (RFC 3339 UTC, seconds); the epoch if unparsable."""
    try:
        moment = datetime.fromisoformat(created.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return EPOCH
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    if moment.year < 1970:
        return EPOCH
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _safe_name(text: str | None) -> str:
    """``text`` made a forkd tag every forkd validator accepts (``[A-Za-z0-9_][A-Za-z0-9_-]{0,63}``), or ""."""
    return _UNSAFE.sub("-", text or "").lstrip("-")[:64].rstrip("-") if text else ""


def link_names(repository_name: str, chain: list[tuple[str, LayerConfig]]) -> list[str]:
    """forkd tags for the links of ``chain`` (``[(manifest digest, config)]`` root → head).

    The head is named after the repository (forkd installs a pulled pack under this name);
    each other link after the tag its child's config names as parent, else
    ``<repository>-<12 hex of its digest>``. Names are made forkd-safe and unique.
    """
    head = _safe_name(repository_name) or "snapshot"
    wanted = [
        _safe_name(chain[i + 1][1].parent.tag if chain[i + 1][1].parent else None)  # type: ignore[union-attr]  # typing debt, decisions/0008
        or f"{head[:51]}-{Digest.parse(digest).hex[:12]}"
        for i, (digest, _) in enumerate(chain[:-1])
    ]
    names: list[str] = []
    for name in [*wanted, head]:
        unique, n = name, 2
        while unique in names:
            suffix = f"-{n}"
            unique, n = name[: 64 - len(suffix)] + suffix, n + 1
        names.append(unique)
    return names


@dataclass(frozen=True)
class PackDownload:
    """A built pack ready to stream: the bytes at ``key``, ``size`` long, hashing to ``sha256`` (hex)."""

    repository: str
    digest: str  # the head layer manifest
    key: str
    sha256: str
    size: int
    _store: Any

    async def iter_bytes(self) -> AsyncIterator[bytes]:
        async with self._store.open(self.key) as stream:
            async for piece in stream:
                yield piece


class ForkdCompatService:
    def __init__(self, ctx: RegistryContext, work_root: Path, *, max_pack_bytes: int = MAX_PACK_BYTES) -> None:
        """``work_root``: where packs are assembled (the data dir's ``tmp``; one directory per build, removed after)."""
        self.ctx = ctx
        self.work_root = work_root
        self.max_pack_bytes = max_pack_bytes
        self._lineage = LineageService(ctx)
        self._limiter = anyio.CapacityLimiter(MAX_CONCURRENT_BUILDS)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    # -- packs built at push ------------------------------------------------------------------

    async def build_after_push(self, namespace: str, name: str, digest: str) -> None:
        """Build the pack of ``digest``, just tagged in ``namespace/name``, when it is a forkd snapshot (layer or
        chain index) of a public repository, so that the next registry.json lists it at once instead of
        building it while it answers. Run after the push's answer is sent (a background task of the
        response). Never raises: a failure is logged (the listing builds or leaves out the pack, as before)."""
        try:
            async with self.ctx.sessions() as session:
                repo = await find_repository(session, namespace, name)
                manifest = await session.get(Manifest, digest)
            if repo is None or not repo.public or manifest is None:
                return
            if not (mt.is_layer(manifest.artifact_type) or manifest.artifact_type == mt.CHAIN_ARTIFACT):
                return
            await self.pack(scope_of(Principal.anonymous(), repo, "pull"), f"@{digest}", count_pull=False)
        except HubError as e:  # too large, damaged (marked), no space: the listing leaves it out or retries
            log.warning("the forkd pack of %s/%s@%s was not built after its push: %s", namespace, name, digest, e)
        except Exception:  # noqa: BLE001 - after the answer: logged, registry.json builds it when asked
            log.exception("building the forkd pack of %s/%s@%s after its push failed", namespace, name, digest)

    # -- registry.json ----------------------------------------------------------------------

    async def registry_json(self, base_url: str) -> dict[str, Any]:
        """forkd's registry (schema_version 1) of every public repository's tags; URLs start with ``base_url``."""
        base_url = base_url.rstrip("/")
        async with self.ctx.sessions() as session:
            repos = list(
                (
                    await session.exec(
                        select(Repository)
                        .where(col(Repository.public).is_(True))
                        .order_by(col(Repository.namespace), col(Repository.name))
                    )
                ).all()
            )
            tags: dict[int, list[tuple[Tag, Manifest]]] = {}
            for batch in batched([r.id for r in repos]):
                rows = await session.exec(
                    select(Tag, Manifest)
                    .join(Manifest, Manifest.digest == Tag.manifest_digest)  # type: ignore[arg-type]
                    .where(col(Tag.repository_id).in_(batch))
                    .order_by(col(Tag.name))
                )
                for tag, manifest in rows.all():
                    tags.setdefault(tag.repository_id, []).append((tag, manifest))
            heads = await _index_heads(
                session, [m.digest for rows in tags.values() for _, m in rows if m.artifact_type == mt.CHAIN_ARTIFACT]
            )
        configs: dict[str, LayerConfig | None] = {}
        packages: dict[str, Any] = {}
        for repo in repos:
            versions: dict[str, Any] = {}
            newest: tuple[datetime, str] | None = None
            repo_tags = tags.get(repo.id, [])  # type: ignore[arg-type]
            for tag, manifest in repo_tags:
                head = heads.get(manifest.digest, manifest)
                entry = await self._version(repo, tag.name, head, configs, base_url)
                if entry is None:
                    continue
                versions[tag.name] = entry
                newest = max(newest or (tag.updated_at, tag.name), (tag.updated_at, tag.name))
            if newest is None:
                continue  # forkd requires at least a "latest" version
            if LATEST not in versions and all(tag.name != LATEST for tag, _ in repo_tags):
                versions[LATEST] = dict(versions[newest[1]])
            packages[repo.full_name] = {"description": repo.description, "versions": versions}
        return {"schema_version": 1, "packages": packages}

    async def _version(
        self, repo: Repository, tag: str, head: Manifest, configs: dict[str, LayerConfig | None], base_url: str
    ) -> dict[str, Any] | None:
        repository = repo.full_name
        if head.config_digest is None:
            return None
        if head.config_digest not in configs:
            try:
                configs[head.config_digest] = LayerConfig.from_json(
                    await self.ctx.store.read(blob_key(head.config_digest))
                )
            except (BlobNotFound, ManifestError) as e:
                log.warning("registry.json: skipping %s:%s, its config is unusable: %s", repository, tag, e)
                configs[head.config_digest] = None
        config = configs[head.config_digest]
        if config is None:
            return None
        # the immutable @digest URL: a tag moved between forkd's registry fetch and its download must not
        # turn into a "sha256 mismatch" (the listed sha256 is this manifest's pack)
        entry: dict[str, Any] = {"url": f"{base_url}/packs/{repository}/@{head.digest}{PACK_SUFFIX}"}
        info = await self._read_info(repository, head.digest)
        if info is None:
            try:  # public: anyone may read it; built once, then served from the cache
                built = await self.pack(
                    scope_of(Principal.anonymous(), repo, "pull"), f"@{head.digest}", count_pull=False
                )
            except HubError as e:
                log.warning("registry.json: leaving out %s:%s, its forkd pack cannot be built: %s", repository, tag, e)
                return None
            info = built.sha256, built.size
        entry["sha256"], entry["size_bytes"] = info
        mem = config.compat.get("memMiB")
        entry["memory_mib"] = mem if isinstance(mem, int) else -(-config.files[mt.MEMORY_FILE].size // _MiB)
        base_image = config.annotations.get(mt.ANNOTATION_BASE_IMAGE)
        if base_image:
            entry["base_image"] = base_image
        entry["created_at"] = forkd_time(config.created)
        return entry

    # -- packs ------------------------------------------------------------------------------

    async def pack(self, scope: RepositoryScope, ref: str, *, count_pull: bool = True) -> PackDownload:
        """The forkd pack of ``ref`` (a tag, or a digest with an optional leading ``@``) in the repository of
        ``scope`` (``pull``), built on first use. A download counts as a pull (``count_pull``); a build for
        ``registry.json`` does not.

        Raises: HubError (NAME_INVALID (a bad tag), MANIFEST_UNKNOWN, DIGEST_INVALID, TOO_LARGE,
        INTERNAL, UNAVAILABLE), StorageUnavailable, StorageFull.
        """
        chain = await self._lineage.chain(scope, ref.removeprefix("@"), count_pull=count_pull)
        repository, name = scope.full_name, scope.name
        key = pack_key(repository, chain.digest)
        cached = await self._cached(repository, chain.digest)
        if cached is not None:
            return cached
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # one build per pack in this process; a concurrent request waits for it
            cached = await self._cached(repository, chain.digest)
            if cached is not None:
                return cached
            damaged = await find_mark(self.ctx, key)
            if damaged is not None:  # refused cheaply: the build failed on damaged content before
                raise _damaged(repository, chain.digest, damaged.reason)
            for link in chain.links:  # a layer found false in any chain fails every chain holding it at once
                damaged = await find_mark(self.ctx, link_mark_key(link.digest))
                if damaged is not None:
                    raise _damaged(repository, chain.digest, damaged.reason)
            return await self._build(repository, name, chain.digest, chain.links)

    async def _build(self, repository: str, name: str, digest: str, chain: list[ChainLink]) -> PackDownload:
        work = await anyio.to_thread.run_sync(self._make_work_dir)
        try:
            try:
                built = await self._assemble(repository, name, digest, chain, work)
            except PackTooLarge as e:
                raise HubError(
                    ErrorCode.TOO_LARGE,
                    f"the forkd pack of {repository}@{digest} is too large: {e}",
                    {"digest": digest},
                ) from None
            except (ManifestError, BlobNotFound, InvalidRange) as e:
                log.error("cannot build the forkd pack of %s@%s: %s (marked damaged)", repository, digest, e)
                with anyio.CancelScope(shield=True):
                    await mark(self.ctx, pack_key(repository, digest), "forkd-pack", str(e))
                    if isinstance(e, LinkDigestMismatch) and 0 <= e.index < len(chain):
                        await mark(self.ctx, link_mark_key(chain[e.index].digest), "forkd-link", str(e))
                raise _damaged(repository, digest, str(e)) from None
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise HubError(
                        ErrorCode.UNAVAILABLE, "no space left to build the forkd pack; retry later", {}
                    ) from None
                raise
            await self._publish(repository, digest, built)
        finally:
            with anyio.CancelScope(shield=True):  # a cancelled request must not leave its work dir behind
                await anyio.to_thread.run_sync(shutil.rmtree, work, True)
        log.info("built the forkd pack of %s@%s: %d bytes, sha256 %s", repository, digest, built.size, built.sha256)
        return PackDownload(repository, digest, pack_key(repository, digest), built.sha256, built.size, self.ctx.store)

    async def _assemble(self, repository: str, name: str, digest: str, chain: list[ChainLink], work: Path) -> BuiltPack:
        layers = [
            (link.digest, LayerManifest.from_json(link.manifest.encode()), LayerConfig.from_json(link.config.encode()))
            for link in chain
        ]
        total = sum(f.size for _, _, config in layers for f in config.files.values())
        if total > self.max_pack_bytes:
            raise HubError(
                ErrorCode.TOO_LARGE,
                f"the forkd pack of {repository}@{digest} would hold {total} bytes, "
                f"over the {self.max_pack_bytes}-byte limit",
                {"limit": self.max_pack_bytes, "size": total},
            )
        names = link_names(name, [(d, config) for d, _, config in layers])
        links = [
            LinkSource(
                names[i],
                names[i - 1] if i else None,
                config,
                manifest.vmstate.digest,
                manifest.vmstate.size,
                await self._chunk_maps(manifest),
            )
            for i, (_, manifest, config) in enumerate(layers)
        ]
        head = layers[-1][2]
        return await anyio.to_thread.run_sync(
            lambda: build_pack(
                links,
                work,
                StoreFrames(self.ctx),
                created_at=forkd_time(head.created),
                description=head.annotations.get(mt.ANNOTATION_DESCRIPTION),
                base_image=head.annotations.get(mt.ANNOTATION_BASE_IMAGE),
            ),
            limiter=self._limiter,
        )

    def _make_work_dir(self) -> Path:
        self.work_root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="forkd-pack-", dir=self.work_root))

    async def _chunk_maps(self, manifest: LayerManifest) -> dict[str, ChunkMap]:
        maps = {}
        for role, desc in manifest.chunk_maps.items():
            limit = self.ctx.limits.chunk_map_bytes
            if desc.size > limit:
                raise HubError(
                    ErrorCode.TOO_LARGE,
                    f"chunk map {desc.digest} is over the {limit}-byte limit",
                    {"limit": limit, "size": desc.size},
                )
            maps[role] = ChunkMap.from_json(await self.ctx.store.read(blob_key(desc.digest)), limit=limit)
        return maps

    async def _publish(self, repository: str, digest: str, built: BuiltPack) -> None:
        """Store the pack, then its info: a pack without info is not served (and is rebuilt over)."""
        async with self.ctx.store.writer(pack_key(repository, digest)) as writer:
            async with await anyio.open_file(built.path, "rb") as f:
                while piece := await f.read(_UPLOAD_PIECE):
                    await writer.write(piece)
            await writer.commit()
        info = json.dumps({"sha256": built.sha256, "size": built.size}).encode()
        await self.ctx.store.put(pack_info_key(repository, digest), info)

    async def _read_info(self, repository: str, digest: str) -> tuple[str, int] | None:
        try:
            doc = json.loads(await self.ctx.store.read(pack_info_key(repository, digest)))
            return str(doc["sha256"]), int(doc["size"])
        except BlobNotFound:
            return None
        except (ValueError, KeyError, TypeError) as e:
            log.warning("ignoring the unreadable info of the forkd pack of %s@%s: %s", repository, digest, e)
            return None

    async def _cached(self, repository: str, digest: str) -> PackDownload | None:
        info = await self._read_info(repository, digest)
        if info is None:
            return None
        key = pack_key(repository, digest)
        try:
            if (await self.ctx.store.stat(key)).size != info[1]:
                return None
        except BlobNotFound:
            return None
        return PackDownload(repository, digest, key, info[0], info[1], self.ctx.store)

    async def redirect_url(self, pack: PackDownload) -> str | None:
        """A presigned URL of the built pack when the store can serve it and redirects are on
        (``FORKD_HUB_BLOB_REDIRECTS``), else None (stream it). forkd's client follows redirects
        (as it does for GitHub release assets). Raises: StorageError."""
        store = self.ctx.store
        if not (self.ctx.blob_redirects and store.capabilities.supports_redirect):
            return None
        return await store.redirect_url(pack.key, expires_in=self.ctx.redirect_expiry)

    # -- housekeeping -----------------------------------------------------------------------

    async def prune(self) -> list[str]:
        """Delete cached packs whose manifest is no longer in their repository (see :func:`prune_packs`)."""
        return await prune_packs(self.ctx)


def link_mark_key(digest: str) -> str:
    """The damage mark of a layer whose assembled file is not what its config declares (any chain, any
    repository): one failed build costs the hub once per such layer, not once per chain or tag."""
    return f"forkd-link/{digest}"


def _damaged(repository: str, digest: str, reason: str) -> HubError:
    return HubError(
        ErrorCode.INTERNAL,
        f"cannot build the forkd pack of {repository}@{digest}: stored content is damaged: {reason}",
        {"digest": digest, "damaged": True},
    )


async def prune_packs(ctx: RegistryContext, *, dry_run: bool = False) -> list[str]:
    """Delete (or with ``dry_run`` only list) cached packs whose manifest is no longer in their
    repository; return their keys. Garbage collection calls this.

    Raises: StorageUnavailable, StorageError.
    """
    keys = [key async for key in ctx.store.list(PACKS_PREFIX)]
    stale: list[str] = []
    async with ctx.sessions() as session:
        for key in keys:
            parsed = _parse_pack_key(key)
            if parsed is None or not await _is_linked(session, *parsed):
                stale.append(key)
    if not dry_run:
        for key in stale:
            try:
                await ctx.store.delete(key)
            except BlobNotFound:
                continue
    return stale


def _parse_pack_key(key: str) -> tuple[str, str, str] | None:
    """``(namespace, name, digest)`` of a pack or info key, or None for anything else."""
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != PACKS_PREFIX:
        return None
    stem = parts[3].removesuffix(PACK_SUFFIX).removesuffix(".json")
    algorithm, _, hexpart = stem.partition("-")
    try:
        return parts[1], parts[2], str(Digest.parse(f"{algorithm}:{hexpart}"))
    except ManifestError:
        return None


async def _is_linked(session: AsyncSession, namespace: str, name: str, digest: str) -> bool:
    row = await session.exec(
        select(RepositoryManifest.manifest_digest)
        .join(Repository, Repository.id == RepositoryManifest.repository_id)  # type: ignore[arg-type]
        .where(Repository.namespace == namespace, Repository.name == name, RepositoryManifest.manifest_digest == digest)
    )
    return row.first() is not None


async def _index_heads(session: AsyncSession, indexes: list[str]) -> dict[str, Manifest]:
    """The head layer of each chain index (the listed layer no other listed layer names as parent)."""
    children: dict[str, list[Manifest]] = {}
    for batch in batched(indexes):
        rows = await session.exec(
            select(ManifestBlob.manifest_digest, Manifest)
            .join(Manifest, Manifest.digest == ManifestBlob.blob_digest)  # type: ignore[arg-type]
            .where(col(ManifestBlob.manifest_digest).in_(batch), ManifestBlob.role == BlobRole.MANIFEST)
        )
        for index, manifest in rows.all():
            children.setdefault(index, []).append(manifest)
    heads: dict[str, Manifest] = {}
    for index, layers in children.items():
        parents = {m.parent_digest for m in layers}
        candidates = [m for m in layers if m.digest not in parents]
        if len(candidates) == 1:
            heads[index] = candidates[0]
    return heads
