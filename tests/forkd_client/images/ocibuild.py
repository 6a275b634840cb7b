"""Build small OCI images by hand for tests: tar layers, ``oci:`` layouts, docker-archives.

Importable by any test (the QEMU tests reuse it)::

    from tests.forkd_client.images.ocibuild import Entry, layer_tar, write_layout, write_docker_archive

    layer = layer_tar([Entry.dir("etc"), Entry.file("etc/hello", b"hi\\n", mode=0o644)])
    info = write_layout(tmp_path / "oci", [layer], tag="v1", env=["PATH=/usr/bin:/bin"])
    # source string for the builder / skopeo: f"oci:{tmp_path / 'oci'}:v1"; info.manifest_digest

:func:`layout_from_rootfs_tar` turns a whole root filesystem tarball (e.g. an ``mmdebstrap`` output) into a
one-layer ``oci:`` layout.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
OCI_LAYER = {
    "none": "application/vnd.oci.image.layer.v1.tar",
    "gzip": "application/vnd.oci.image.layer.v1.tar+gzip",
    "zstd": "application/vnd.oci.image.layer.v1.tar+zstd",
}
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
MTIME = 1_700_000_000

#: a valid ``security.capability`` value (VFS_CAP_REVISION_2, effective): cap_net_raw permitted
CAP_NET_RAW = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)


@dataclass
class Entry:
    """One tar entry. ``kind``: file, dir, symlink, hardlink, chr, blk, fifo. ``declared_size`` lies
    about the size in the header (for hostile layers)."""

    name: str
    kind: str = "file"
    data: bytes = b""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    mtime: float = MTIME
    target: str = ""
    xattrs: dict[str, bytes] = field(default_factory=dict)
    declared_size: int | None = None

    @classmethod
    def file(cls, name: str, data: bytes = b"", mode: int = 0o644, **kw) -> Entry:
        return cls(name, "file", data, mode, **kw)

    @classmethod
    def dir(cls, name: str, mode: int = 0o755, **kw) -> Entry:
        return cls(name, "dir", mode=mode, **kw)

    @classmethod
    def symlink(cls, name: str, target: str, **kw) -> Entry:
        return cls(name, "symlink", mode=0o777, target=target, **kw)

    @classmethod
    def hardlink(cls, name: str, target: str, **kw) -> Entry:
        return cls(name, "hardlink", target=target, **kw)

    @classmethod
    def whiteout(cls, path: str) -> Entry:
        """Hide ``path`` of the lower layers."""
        parent, _, base = path.rpartition("/")
        return cls.file(f"{parent}/.wh.{base}" if parent else f".wh.{base}", mode=0o600)

    @classmethod
    def opaque(cls, directory: str) -> Entry:
        """Hide everything the lower layers put in ``directory``."""
        return cls.file(f"{directory}/.wh..wh..opq", mode=0o600)


_KINDS = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "chr": tarfile.CHRTYPE,
    "blk": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}


def layer_tar(entries: Sequence[Entry], *, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """An uncompressed tar of ``entries``, in the order given."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt, encoding="utf-8", errors="surrogateescape") as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = _KINDS[e.kind]
            info.mode, info.uid, info.gid, info.mtime = e.mode, e.uid, e.gid, e.mtime
            info.linkname = e.target
            if e.kind in ("chr", "blk"):
                info.devmajor, info.devminor = 1, 3
            if e.xattrs:
                info.pax_headers = {
                    f"SCHILY.xattr.{k}": v.decode("utf-8", "surrogateescape") for k, v in e.xattrs.items()
                }
            if e.kind == "file":
                info.size = len(e.data)
                if e.declared_size is None:
                    tar.addfile(info, io.BytesIO(e.data))
                else:
                    info.size = e.declared_size
                    tar.fileobj.write(info.tobuf(tar.format, tar.encoding, tar.errors))
                    tar.fileobj.write(e.data)
                    tar.offset += len(info.tobuf(tar.format, tar.encoding, tar.errors)) + len(e.data)
            else:
                tar.addfile(info)
    return out.getvalue()


def compress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.compress(data, mtime=0)
    if compression == "zstd":
        return zstandard.ZstdCompressor().compress(data)
    return data


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_config(
    diff_ids: Sequence[str],
    *,
    arch: str = "amd64",
    env: Sequence[str] | None = None,
    workdir: str | None = None,
    user: str | None = None,
    cmd: Sequence[str] | None = ("/bin/sh",),
    entrypoint: Sequence[str] | None = None,
) -> dict:
    config: dict = {
        "Env": list(env) if env is not None else ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    }
    if workdir is not None:
        config["WorkingDir"] = workdir
    if user is not None:
        config["User"] = user
    if cmd is not None:
        config["Cmd"] = list(cmd)
    if entrypoint is not None:
        config["Entrypoint"] = list(entrypoint)
    return {
        "architecture": arch,
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
    }


@dataclass
class LayoutInfo:
    """What :func:`write_layout` wrote: the digest the tag names (index or manifest) and the image's parts."""

    top_digest: str
    manifest_digest: str
    config_digest: str
    layer_digests: list[str]
    diff_ids: list[str]


class _Blobs:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)

    def put(self, data: bytes) -> str:
        digest = sha256(data)
        (self.root / "blobs" / "sha256" / digest.removeprefix("sha256:")).write_bytes(data)
        return digest


def write_layout(
    root: Path,
    layers: Sequence[bytes],
    *,
    tag: str | None = "latest",
    compression: str = "gzip",
    media: str = "oci",
    platforms: Sequence[tuple[str, str]] | None = None,
    config: dict | None = None,
    **config_kw,
) -> LayoutInfo:
    """Write (or add to) an OCI image layout at ``root``: ``layers`` are uncompressed tars, stored with
    ``compression``; ``media`` ``oci`` or ``docker`` (schema2 media types). With ``platforms``
    (``[(os, arch), …]``) the tag names an image index with one manifest per platform (same layers).
    ``config`` replaces the generated config (its diff_ids are then yours to get right); other keywords go to
    :func:`image_config` (``env``, ``workdir``, ``user``, ``cmd``, ``entrypoint``, and ``arch`` for a single
    manifest)."""
    blobs = _Blobs(root)
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    diff_ids = [sha256(layer) for layer in layers]
    layer_descs = []
    for layer in layers:
        data = compress(layer, compression)
        media_type = OCI_LAYER[compression] if media == "oci" else DOCKER_LAYER
        layer_descs.append({"mediaType": media_type, "digest": blobs.put(data), "size": len(data)})
    manifests = []
    config_digest = manifest_digest = ""
    single_arch = config_kw.pop("arch", "amd64")
    for os_name, arch in platforms or [("linux", single_arch)]:
        cfg = config if config is not None else image_config(diff_ids, arch=arch, **config_kw)
        cfg = {**cfg, "os": os_name, "architecture": arch} if config is None else cfg
        cfg_bytes = json.dumps(cfg, sort_keys=True).encode()
        cfg_digest = blobs.put(cfg_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST if media == "oci" else DOCKER_MANIFEST,
            "config": {
                "mediaType": OCI_CONFIG if media == "oci" else DOCKER_CONFIG,
                "digest": cfg_digest,
                "size": len(cfg_bytes),
            },
            "layers": layer_descs,
        }
        m_bytes = json.dumps(manifest, sort_keys=True).encode()
        m_digest = blobs.put(m_bytes)
        manifests.append(
            {
                "mediaType": manifest["mediaType"],
                "digest": m_digest,
                "size": len(m_bytes),
                "platform": {"os": os_name, "architecture": arch},
            }
        )
        if (os_name, arch) == ("linux", "amd64") or not platforms:
            config_digest, manifest_digest = cfg_digest, m_digest
    if platforms:
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
        i_bytes = json.dumps(index, sort_keys=True).encode()
        top = {"mediaType": OCI_INDEX, "digest": blobs.put(i_bytes), "size": len(i_bytes)}
    else:
        top = {k: manifests[0][k] for k in ("mediaType", "digest", "size")}
    if tag is not None:
        top["annotations"] = {"org.opencontainers.image.ref.name": tag}
    index_path = root / "index.json"
    outer = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2, "manifests": []}
    outer["manifests"] = [
        m
        for m in outer["manifests"]
        if tag is None or m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag
    ] + [top]
    index_path.write_text(json.dumps(outer))
    return LayoutInfo(top["digest"], manifest_digest, config_digest, [d["digest"] for d in layer_descs], diff_ids)


def write_docker_archive(
    path: Path,
    layers: Sequence[bytes],
    *,
    repo_tags: Sequence[str] = ("example/app:latest",),
    config: dict | None = None,
    **config_kw,
) -> str:
    """A ``docker save``-style archive (uncompressed layer tars); returns the config digest (the image ID)."""
    diff_ids = [sha256(layer) for layer in layers]
    cfg_bytes = json.dumps(
        config if config is not None else image_config(diff_ids, **config_kw), sort_keys=True
    ).encode()
    cfg_digest = sha256(cfg_bytes)
    members: list[tuple[str, bytes]] = [(f"{cfg_digest.removeprefix('sha256:')}.json", cfg_bytes)]
    layer_names = []
    for layer, diff_id in zip(layers, diff_ids, strict=True):
        name = f"{diff_id.removeprefix('sha256:')}/layer.tar"
        layer_names.append(name)
        members.append((name, layer))
    manifest = [{"Config": members[0][0], "RepoTags": list(repo_tags), "Layers": layer_names}]
    members.append(("manifest.json", json.dumps(manifest).encode()))
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), MTIME
            tar.addfile(info, io.BytesIO(data))
    return cfg_digest


def layout_from_rootfs_tar(rootfs_tar: Path, root: Path, *, tag: str = "latest", **config_kw) -> LayoutInfo:
    """A one-layer ``oci:`` layout whose layer is the root filesystem tarball ``rootfs_tar`` (e.g. what
    ``mmdebstrap … root.tar`` wrote), gzip-compressed (level 1) as it streams: never whole in memory."""
    blobs = _Blobs(root)
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    raw_sha, gz_sha = hashlib.sha256(), hashlib.sha256()
    tmp = root / "blobs" / "sha256" / "layer.partial"

    class _Tee(io.RawIOBase):
        def __init__(self, out) -> None:
            self.out = out

        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            gz_sha.update(b)
            return self.out.write(b)

    with open(rootfs_tar, "rb") as src, open(tmp, "wb") as out:
        with gzip.GzipFile(fileobj=_Tee(out), mode="wb", compresslevel=1, mtime=0) as gz:
            while chunk := src.read(1 << 20):
                raw_sha.update(chunk)
                gz.write(chunk)
    size = tmp.stat().st_size
    layer_digest = "sha256:" + gz_sha.hexdigest()
    tmp.rename(root / "blobs" / "sha256" / gz_sha.hexdigest())
    diff_id = "sha256:" + raw_sha.hexdigest()
    cfg_bytes = json.dumps(image_config([diff_id], **config_kw), sort_keys=True).encode()
    cfg_digest = blobs.put(cfg_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": cfg_digest, "size": len(cfg_bytes)},
        "layers": [{"mediaType": OCI_LAYER["gzip"], "digest": layer_digest, "size": size}],
    }
    m_bytes = json.dumps(manifest, sort_keys=True).encode()
    m_digest = blobs.put(m_bytes)
    top = {
        "mediaType": OCI_MANIFEST,
        "digest": m_digest,
        "size": len(m_bytes),
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    return LayoutInfo(m_digest, m_digest, cfg_digest, [layer_digest], [diff_id])


def tree_listing(root: Path, *, mtimes: bool = True) -> dict[str, dict]:
    """Every entry under ``root`` (not followed through symlinks) → type, mode, uid, gid, size, content
    sha256, link target, xattrs, mtime (whole seconds) and hard-link group (the sorted paths sharing its
    inode). What two extractions of the same image must agree on, file by file."""
    import os
    import stat as st_

    found: dict[str, dict] = {}
    by_inode: dict[tuple[int, int], list[str]] = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = os.path.join(directory, name)
            rel = "/" + os.path.relpath(path, root)
            s = os.lstat(path)
            kind = (
                "dir"
                if st_.S_ISDIR(s.st_mode)
                else "symlink"
                if st_.S_ISLNK(s.st_mode)
                else "file"
                if st_.S_ISREG(s.st_mode)
                else "other"
            )
            item: dict = {"type": kind, "uid": s.st_uid, "gid": s.st_gid}
            if kind != "symlink":
                item["mode"] = oct(st_.S_IMODE(s.st_mode))
                item["xattrs"] = {
                    x: os.getxattr(path, x, follow_symlinks=False).hex()
                    for x in sorted(os.listxattr(path, follow_symlinks=False))
                }
            if kind == "file":
                item["size"] = s.st_size
                with open(path, "rb") as f:
                    item["sha256"] = hashlib.sha256(f.read()).hexdigest()
                by_inode.setdefault((s.st_dev, s.st_ino), []).append(rel)
            if kind == "symlink":
                item["target"] = os.readlink(path)
            if mtimes:
                item["mtime"] = int(s.st_mtime)
            found[rel] = item
    for paths in by_inode.values():
        for p in paths:
            found[p]["links"] = sorted(paths)
    return found
