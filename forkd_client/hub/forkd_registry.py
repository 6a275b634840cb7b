"""``forkd pull --hub REGISTRY_URL NAME[@VERSION]``: forkd's own pull, from a ``registry.json``.

forkd's pull (/work/shared/reference/forkd-formats.md §4.2), so commands written for forkd keep
working: ``--hub`` is the full URL of a ``registry.json`` (``schema_version`` 1); ``NAME`` is
``owner/name`` and the version defaults to ``latest``; a target that is an ``http(s)://`` URL
is a pack URL used directly (no expected sha256). The registry is fetched fresh, the pack
downloaded into the store's staging directory and, when the registry gives one, its sha256
compared (case-insensitively) before anything is read. A pack that declares a rootfs gets its
sidecar ``<sha16>.rootfs.zst`` fetched from beside the pack URL (a missing sidecar only warns,
as in forkd). Then the pack is installed by :func:`forkd_client.packs.unpack` (safe reader,
every hash checked, rootfs placed only inside the allowed roots).

Errors: HubError (registry or pack unreachable, not found, malformed, sha256 mismatch),
HubUnreachable, the errors of :func:`forkd_client.packs.unpack`, OSError.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from manifest.forkd_unpack import read_pack_manifest
from manifest.rootfs_sidecar import sidecar_name

from ..packs import unpack
from .errors import DigestInvalid, HubError, HubUnreachable, NotFound
from .lean_httpx import httpx
from .transport import make_http_client

if TYPE_CHECKING:
    from ..snapdir import LocalSnapshot
    from ..store import SnapshotStore

MAX_REGISTRY_BYTES = 16 << 20
_TARGET = re.compile(r"[^\s/@]+/[^\s/@]+(@[^\s/@]+)?")


def resolve_target(http: httpx.Client, registry_url: str, target: str) -> tuple[str, str | None]:
    """``(pack URL, expected sha256 or None)`` for ``target``, as forkd resolves it. Raises HubError."""
    if target.startswith(("http://", "https://")):
        return target, None
    if not _TARGET.fullmatch(target):
        raise HubError(f"invalid target {target!r}: use owner/name[@version] or a pack URL")
    name, _, version = target.partition("@")
    version = version or "latest"
    doc = _get_json(http, registry_url)
    packages = doc.get("packages") if isinstance(doc, dict) else None
    if not isinstance(packages, dict):
        raise HubError(f"{registry_url} is not a forkd registry (no 'packages' object)")
    package = packages.get(name)
    versions = package.get("versions") if isinstance(package, dict) else None
    if not isinstance(versions, dict):
        raise NotFound(f"{name!r} is not in the registry {registry_url}")
    entry = versions.get(version)
    if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
        raise NotFound(
            f"{name!r} has no version {version!r} in {registry_url} (versions: {', '.join(sorted(versions)) or 'none'})"
        )
    sha = entry.get("sha256")
    return entry["url"], sha.lower() if isinstance(sha, str) else None


def pull_from_registry(
    store: SnapshotStore,
    registry_url: str | None,
    target: str,
    *,
    tag: str | None = None,
    force: bool = False,
    warnings: list[str] | None = None,
    http: httpx.Client | None = None,
) -> list[LocalSnapshot]:
    """Pull ``target`` the way forkd's ``pull`` does and install it; returns the snapshots root → head.

    ``registry_url`` may be None only when ``target`` is a pack URL. ``tag`` renames a
    single-snapshot pack (forkd's ``--tag``). Problems forkd only warns about (a missing rootfs
    sidecar) are appended to ``warnings``. Raises HubError, PackError, ClientError, OSError.
    """
    own = http is None
    http = http or make_http_client(300)
    try:
        if registry_url is None and not target.startswith(("http://", "https://")):
            raise HubError("give the registry with --hub URL (the full registry.json URL), or a pack URL")
        url, sha = resolve_target(http, registry_url or "", target)
        with store.staging("forkd-pull") as staged:
            pack = staged / "pack.forkd-snapshot.tar.zst"
            actual = _download(http, url, pack)
            if sha is not None and actual != sha:
                raise DigestInvalid(f"sha256 mismatch for {url}: the registry says {sha}, the download is {actual}")
            rootfs = read_pack_manifest(pack).rootfs
            if isinstance(rootfs, dict) and isinstance(rootfs.get("sha256"), str):
                name = sidecar_name(rootfs["sha256"])
                sidecar_url = url.rsplit("/", 1)[0] + "/" + name
                with contextlib.suppress(
                    HubError
                ):  # unpack then warns that the sidecar is missing, as forkd's pull does
                    _download(http, sidecar_url, staged / name)
            return unpack(store, pack, tag=tag, force=force, warnings=warnings)
    finally:
        if own:
            http.close()


def _get_json(http: httpx.Client, url: str) -> Any:
    try:
        with http.stream("GET", url, follow_redirects=True) as r:
            _check(r, url)
            body = b""
            for piece in r.iter_bytes():
                body += piece
                if len(body) > MAX_REGISTRY_BYTES:
                    raise HubError(f"{url} is larger than {MAX_REGISTRY_BYTES} bytes")
    except httpx.TransportError as e:
        raise HubUnreachable(f"{url} is unreachable: {e}") from None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HubError(f"{url} is not JSON: {e}") from None


def _download(http: httpx.Client, url: str, out: Path) -> str:
    """Stream ``url`` into the new file ``out``; returns the lowercase hex sha256 of what arrived."""
    digest = hashlib.sha256()
    try:
        with http.stream("GET", url, follow_redirects=True) as r, open(out, "xb") as f:
            _check(r, url)
            for piece in r.iter_bytes(1 << 20):
                digest.update(piece)
                f.write(piece)
    except httpx.TransportError as e:
        out.unlink(missing_ok=True)
        raise HubUnreachable(f"{url} is unreachable: {e}") from None
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return digest.hexdigest()


def _check(response: httpx.Response, url: str) -> None:
    if response.status_code == 404:
        raise NotFound(f"{url}: 404 not found", status=404)
    if response.status_code != 200:
        raise HubError(f"{url}: HTTP {response.status_code}", status=response.status_code)
