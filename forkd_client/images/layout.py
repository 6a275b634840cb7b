"""An OCI image layout directory (``oci:DIR[:tag]``, ``oci:DIR@sha256:…``) as an image source.

The layout must have an ``oci-layout`` file and an ``index.json``. The image is the ``index.json`` entry
whose ``org.opencontainers.image.ref.name`` is the tag, the entry (or any blob) with the digest, or, without
either, the only entry. Blobs are read from ``blobs/sha256/<hex>``; nothing here trusts them: the
fetcher (:mod:`.fetch`) hashes every byte it uses.

Errors: :class:`ImageNotFound` (no layout, no such tag or digest, a missing blob), :class:`MalformedImage`
(a bad ``oci-layout`` / ``index.json``, a blob that is not a regular file), :class:`LimitExceeded`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
from collections.abc import Iterator

from .errors import ImageNotFound, LimitExceeded, MalformedImage
from .manifests import Descriptor, parse_descriptor
from .reference import OciLayoutRef

REF_NAME = "org.opencontainers.image.ref.name"
_CHUNK = 1 << 20


class LayoutSource:
    """Reads manifests and blobs of one ``oci:`` reference."""

    def __init__(self, ref: OciLayoutRef) -> None:
        self.ref = ref
        self.name = ref.name
        self.root = ref.path

    def read_manifest(self, digest: str | None, limit: int) -> tuple[bytes, str | None, str | None]:
        """``(bytes, media type, digest they must have)`` of the reference's image (``digest`` None) or of
        the blob ``digest``. Raises ImageNotFound, MalformedImage, LimitExceeded."""
        if digest is None:
            desc = self._select(limit)
            return self._read_small(desc.digest, limit), desc.media_type, desc.digest
        return self._read_small(digest, limit), None, digest

    @contextlib.contextmanager
    def open_blob(self, desc: Descriptor) -> Iterator[Iterator[bytes]]:
        """The blob's bytes in chunks. Raises ImageNotFound, MalformedImage."""
        with self._open(desc.digest) as f:
            yield iter(lambda: f.read(_CHUNK), b"")

    def _select(self, limit: int) -> Descriptor:
        if not self.root.is_dir():
            raise ImageNotFound(f"{self.ref}: {self.root} is not a directory")
        try:
            version = json.loads((self.root / "oci-layout").read_bytes()[:4096]).get("imageLayoutVersion")
        except FileNotFoundError:
            raise ImageNotFound(f"{self.ref}: {self.root} has no oci-layout file (not an OCI image layout)") from None
        except (ValueError, AttributeError):
            raise MalformedImage(f"{self.ref}: oci-layout is not a JSON object") from None
        if not isinstance(version, str) or not version.startswith("1."):
            raise MalformedImage(f"{self.ref}: unsupported imageLayoutVersion {version!r}")
        index_path = self.root / "index.json"
        try:
            with open(index_path, "rb") as f:
                data = f.read(limit + 1)
        except FileNotFoundError:
            raise ImageNotFound(f"{self.ref}: the layout has no index.json") from None
        if len(data) > limit:
            raise LimitExceeded(f"{self.ref}: index.json is larger than {limit} bytes", limit="max_manifest_bytes")
        try:
            entries = json.loads(data).get("manifests")
        except (ValueError, AttributeError):
            raise MalformedImage(f"{self.ref}: index.json is not a JSON object") from None
        if not isinstance(entries, list):
            raise MalformedImage(f"{self.ref}: index.json has no manifests list")
        descriptors = [parse_descriptor(entry, f"{self.ref}: index.json") for entry in entries]
        if self.ref.digest:
            found = next((d for d in descriptors if d.digest == self.ref.digest), None)
            return found or Descriptor("", self.ref.digest, -1)
        names = [d.annotations.get(REF_NAME) for d in descriptors]
        if self.ref.tag:
            found = next((d for d, n in zip(descriptors, names, strict=True) if n == self.ref.tag), None)
            if found is None:
                known = ", ".join(sorted({n for n in names if n})) or "none"
                raise ImageNotFound(f"{self.ref}: no image tagged {self.ref.tag!r} in the layout (tags: {known})")
            return found
        if len(descriptors) != 1:
            known = ", ".join(sorted({n for n in names if n})) or "untagged entries only"
            raise ImageNotFound(
                f"{self.ref}: the layout holds {len(descriptors)} images; name one as oci:DIR:TAG (tags: {known})"
            )
        return descriptors[0]

    @contextlib.contextmanager
    def _open(self, digest: str) -> Iterator[io.FileIO]:
        algorithm, _, hexpart = digest.partition(":")
        path = self.root / "blobs" / algorithm / hexpart
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            raise ImageNotFound(f"{self.ref}: blob {digest} is missing from the layout") from None
        with io.FileIO(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise MalformedImage(f"{self.ref}: blob {digest} is not a regular file")
            yield f

    def _read_small(self, digest: str, limit: int) -> bytes:
        with self._open(digest) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise LimitExceeded(
                f"{self.ref}: manifest {digest} is larger than {limit} bytes", limit="max_manifest_bytes"
            )
        return data
