"""``build_rootfs``: an image reference or a Debian package list → a cached, bootable-ready ext4 image.

The build is an object whose methods are its stages (:class:`RootfsBuild`): identify the source cheaply
(the image's manifest digest, or the Debian inputs), derive the cache key, return a valid cache entry if
there is one, else fetch (download and verify the layers, or run mmdebstrap), apply the layers into a tree,
write ``/.forkd`` (:mod:`.inject`), make the ext4 image (:mod:`.ext4`) and publish it (:mod:`.cache`).
Every intermediate lives in one work directory that is removed whatever happens.

Provenance annotations (``BuiltRootfs.annotations``):

- images: ``org.opencontainers.image.base.digest`` (the digest of the linux/amd64 manifest used: it pins
  the exact content; for a docker-archive, which has no manifest, the config digest, docker's image ID),
  ``org.opencontainers.image.base.name`` (the reference as given: ``HOST/repo:tag``, ``oci:/abs/dir:tag``,
  ``docker-archive:/abs/file``), and ``dev.forkd.image.index.digest`` when the reference named an index;
- Debian: ``dev.forkd.debian.suite``, ``dev.forkd.debian.variant`` and ``dev.forkd.debian.packages``
  (``name=version`` of each requested package, comma-joined; every installed package is in
  ``BuiltRootfs.packages`` and ``/.forkd/image.json``).

Errors: everything :mod:`forkd_client.images.errors` lists; OSError for host facts (ENOSPC).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .apply import ApplyReport, LayerInput, apply_layers
from .archive import fetch_archive
from .cache import IMAGE_FILE, RootfsCache, cache_root
from .debian import DebianInputs, DebianSpec, debian_inputs, installed_packages, requested_versions, run_mmdebstrap
from .errors import ImageNotFound, InvalidSetting
from .ext4 import MiB, build_ext4, scan_tree
from .fetch import FetchedImage, ResolvedImage, download, resolve
from .inject import Inject, check_inject, check_reserved, has_posix_shell, inject_fingerprint, write_forkd_dir
from .layout import LayoutSource
from .limits import ImageLimits
from .manifests import ImageConfig
from .progress import Progress, no_progress
from .provenance import BASE_DIGEST, BASE_NAME, DEBIAN_PACKAGES, DEBIAN_SUITE, DEBIAN_VARIANT, INDEX_DIGEST
from .reference import DockerArchiveRef, ImageRef, OciLayoutRef, RegistryRef, parse_image_reference

if TYPE_CHECKING:
    from .registry import RegistrySource

#: bump when the same inputs would give different bytes (it is part of every cache key)
BUILDER_VERSION = "1"


@dataclass(frozen=True)
class BuiltRootfs:
    """A built rootfs image in the cache. ``packages``: Debian package → version (empty for images)."""

    path: Path
    size: int
    key: str
    source: str
    annotations: dict[str, str]
    env: list[str]
    workdir: str
    has_shell: bool
    notes: list[str] = field(default_factory=list)
    packages: dict[str, str] = field(default_factory=dict)
    cache_hit: bool = False

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["path"] = str(self.path)
        record.pop("cache_hit")
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> BuiltRootfs:
        names = {"size", "key", "source", "annotations", "env", "workdir", "has_shell", "notes", "packages"}
        return cls(path=Path(record["path"]), cache_hit=True, **{k: record[k] for k in names})


def build_rootfs(
    source: str | ImageRef | DebianSpec,
    *,
    size_mib: int | None = None,
    inject: Inject | None = None,
    cache_dir: Path | None = None,
    limits: ImageLimits | None = None,
    progress: Progress = no_progress,
) -> BuiltRootfs:
    """Build (or find in the cache) the ext4 rootfs of ``source``: an image reference string or object
    (:mod:`.reference`) or a :class:`~forkd_client.images.debian.DebianSpec`.

    ``size_mib`` fixes the image size (default: the tree plus headroom, docs/images.md); ``inject`` adds files
    under ``/.forkd`` (``path → (content, mode)``). Raises the errors of :mod:`forkd_client.images.errors`.
    """
    if size_mib is not None and (not isinstance(size_mib, int) or isinstance(size_mib, bool) or size_mib <= 0):
        raise InvalidSetting(f"size_mib must be a positive number of MiB, not {size_mib!r}")
    check_inject(inject or {})
    cache = RootfsCache(cache_dir or cache_root())
    limits = limits or ImageLimits.from_env()
    if isinstance(source, DebianSpec):
        return DebianBuild(source, cache, size_mib=size_mib, inject=inject, limits=limits, progress=progress).run()
    ref = parse_image_reference(source) if isinstance(source, str) else source
    return ImageBuild(ref, cache, size_mib=size_mib, inject=inject, limits=limits, progress=progress).run()


class RootfsBuild:
    """The stages shared by both kinds of source; subclasses say how to identify and fetch."""

    kind = "?"

    def __init__(
        self,
        cache: RootfsCache,
        *,
        size_mib: int | None,
        inject: Inject | None,
        limits: ImageLimits,
        progress: Progress,
    ) -> None:
        self.cache = cache
        self.size_mib = size_mib
        self.inject = inject
        self.limits = limits
        self.progress = progress
        self.notes: list[str] = []

    # stages a subclass provides
    def identify(self) -> dict[str, Any]:
        """The source's identity (cheap: no layer is read)."""
        raise NotImplementedError

    def content_seed(self) -> bytes:
        """What the filesystem UUID derives from: the content only, so builds of one image share chunks."""
        raise NotImplementedError

    def fetch(self, work: Path) -> tuple[list[LayerInput], ImageConfig | None]:
        raise NotImplementedError

    def provenance(self, tree: Path) -> tuple[str, dict[str, str], dict[str, str]]:
        """``(source name, annotations, installed packages)``."""
        raise NotImplementedError

    # the pipeline
    def key(self) -> str:
        document = {
            "builder": BUILDER_VERSION,
            "kind": self.kind,
            "source": self.identify(),
            "size_mib": self.size_mib,
            "inject": inject_fingerprint(self.inject),
        }
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()

    def run(self) -> BuiltRootfs:
        key = self.key()
        with self.cache.lock(key):
            hit = self.cache.lookup(key)
            if hit is not None:
                with contextlib.suppress(KeyError, TypeError, ValueError):  # a damaged record: build again
                    return BuiltRootfs.from_record(hit)
            with self.cache.work_dir() as work:
                return self._build(key, work)

    def _build(self, key: str, work: Path) -> BuiltRootfs:
        layers, config = self.fetch(work)
        tree = work / "tree"
        report: ApplyReport = apply_layers(layers, tree, limits=self.limits, progress=self.progress)
        for layer in layers:
            if layer.path.is_relative_to(work):
                layer.path.unlink()  # applied: free the space before the image is written
        self.notes += report.notes
        check_reserved(tree)
        name, annotations, packages = self.provenance(tree)
        env = config.env if config else ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
        workdir = (config.working_dir if config else None) or "/"
        newest = scan_tree(tree).newest_mtime
        image_json = {
            "builder": BUILDER_VERSION,
            "source": name,
            "annotations": annotations,
            "config": _config_json(config),
            "layers": report.diff_ids,
            "packages": packages,
        }
        write_forkd_dir(
            tree,
            inject=self.inject,
            env=env,
            workdir=workdir,
            image_json=image_json,
            mtime=newest,
            note=self.notes.append,
        )
        shell = has_posix_shell(tree)
        staged = work / "entry"
        staged.mkdir()
        size = self.size_mib * MiB if self.size_mib is not None else None
        built = build_ext4(
            tree, staged / IMAGE_FILE, seed=self.content_seed(), size_bytes=size, workdir=work, progress=self.progress
        )
        result = BuiltRootfs(
            staged / IMAGE_FILE, built.size, key, name, annotations, env, workdir, shell, self.notes, packages
        )
        path = self.cache.publish(key, staged, result.to_record())
        return BuiltRootfs(path, built.size, key, name, annotations, env, workdir, shell, self.notes, packages)


def _config_json(config: ImageConfig | None) -> dict[str, Any]:
    if config is None:
        return {}
    return {
        "Env": config.env,
        "WorkingDir": config.working_dir,
        "User": config.user,
        "Entrypoint": config.entrypoint,
        "Cmd": config.cmd,
    }


class ImageBuild(RootfsBuild):
    kind = "image"

    def __init__(self, ref: ImageRef, cache: RootfsCache, **kw: Any) -> None:
        super().__init__(cache, **kw)
        self.ref = ref
        self.resolved: ResolvedImage | None = None
        self.fetched: FetchedImage | None = None
        self.registry: RegistrySource | None = None
        self._identity: dict[str, Any] | None = None

    def identify(self) -> dict[str, Any]:
        if self._identity is not None:
            return self._identity
        if isinstance(self.ref, DockerArchiveRef):
            # an archive has no manifest: its verified content is the identity, read once here
            self._identity = {"name": self.ref.name, "archive": _file_digest(self.ref.path)}
            return self._identity
        if isinstance(self.ref, RegistryRef):
            from .registry import RegistrySource  # httpx is imported only when a registry is used

            self.registry = RegistrySource(self.ref)
            source: LayoutSource | RegistrySource = self.registry
        else:
            assert isinstance(self.ref, OciLayoutRef)
            source = LayoutSource(self.ref)
        self.resolved = resolve(source, self.limits)
        self._identity = {"name": self.ref.name, "manifest": self.resolved.manifest_digest}
        return self._identity

    def content_seed(self) -> bytes:
        assert self.fetched is not None
        return self.fetched.manifest_digest.encode()

    def fetch(self, work: Path) -> tuple[list[LayerInput], ImageConfig | None]:
        blobs = work / "blobs"
        blobs.mkdir()
        try:
            if isinstance(self.ref, DockerArchiveRef):
                self.fetched = fetch_archive(self.ref, blobs, limits=self.limits, progress=self.progress)
            else:
                assert self.resolved is not None
                self.fetched = download(self.resolved, blobs, limits=self.limits, progress=self.progress)
        finally:
            if self.registry is not None:
                self.registry.close()
        return self.fetched.layers, self.fetched.config

    def provenance(self, tree: Path) -> tuple[str, dict[str, str], dict[str, str]]:
        assert self.fetched is not None
        annotations = {BASE_DIGEST: self.fetched.manifest_digest, BASE_NAME: self.fetched.name}
        if self.fetched.index_digest:
            annotations[INDEX_DIGEST] = self.fetched.index_digest
        return self.fetched.name, annotations, {}

    def run(self) -> BuiltRootfs:
        try:
            return super().run()
        finally:
            if self.registry is not None:
                self.registry.close()


class DebianBuild(RootfsBuild):
    kind = "debian"

    def __init__(self, spec: DebianSpec, cache: RootfsCache, **kw: Any) -> None:
        super().__init__(cache, **kw)
        self.spec = spec
        self.inputs: DebianInputs | None = None

    def identify(self) -> dict[str, Any]:
        if self.inputs is None:
            self.inputs = debian_inputs(self.spec)
        return {"debian": self.inputs.key}

    def content_seed(self) -> bytes:
        assert self.inputs is not None
        return self.inputs.key.encode()

    def fetch(self, work: Path) -> tuple[list[LayerInput], ImageConfig | None]:
        assert self.inputs is not None
        tarball = self.cache.debian_tarball(self.inputs.key)
        with self.cache.lock(f"debian-{self.inputs.key}"):
            if not tarball.is_file():
                written = work / "debian.tar"
                run_mmdebstrap(self.inputs, written, work, self.progress)
                self.cache.publish_file(written, tarball)
        return [LayerInput(tarball, f"debian:{self.spec.suite}")], None

    def provenance(self, tree: Path) -> tuple[str, dict[str, str], dict[str, str]]:
        packages = installed_packages(tree)
        annotations = {
            DEBIAN_SUITE: self.spec.suite,
            DEBIAN_VARIANT: self.spec.variant,
            DEBIAN_PACKAGES: requested_versions(self.spec, packages),
        }
        name = f"debian:{self.spec.suite}" + (f"+{','.join(self.spec.package_names)}" if self.spec.packages else "")
        return name, annotations, packages


def _file_digest(path: Path) -> str:
    """sha256 of a file (the identity of a docker-archive). Raises ImageNotFound for a missing file."""
    sha = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
    except (FileNotFoundError, IsADirectoryError):
        raise ImageNotFound(f"docker-archive:{path}: no such file") from None
    return "sha256:" + sha.hexdigest()
