"""Where an image comes from: ``oci:DIR[:tag]``, ``oci:DIR@sha256:…``, ``docker-archive:FILE``, or a
registry reference ``HOST[:PORT]/path/repo[:tag|@sha256:…]`` (``docker://`` in front is accepted).

A forkd hub is just an OCI registry here. A registry reference must name its host (there is no default
registry): the first component is a host when it contains ``.`` or ``:``, is ``localhost`` or is a
bracketed IPv6 address. Plain http is used only for loopback hosts (127.0.0.0/8, ``localhost``, ``::1``)
and for hosts named in ``FORKD_INSECURE_REGISTRIES`` (comma-separated ``host[:port]``, like docker's
insecure-registries); every other registry is reached over https with certificate checks.

``oci:DIR:tag`` splits at the first ``:`` after ``oci:`` as skopeo does (a layout path cannot hold
``:``); without a tag, a layout whose index lists exactly one image means that one.

Errors: :class:`~forkd_client.images.errors.InvalidImageReference` (a UsageError) naming what is wrong.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidImageReference

INSECURE_ENV = "FORKD_INSECURE_REGISTRIES"
DEFAULT_TAG = "latest"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_HOST = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?"
)
#: the image-layout spec's grammar of an ``org.opencontainers.image.ref.name``
_REF_NAME = re.compile(
    r"[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*(?:/[A-Za-z0-9]+(?:(?:[-._:@+]|--)[A-Za-z0-9]+)*)*"
)


@dataclass(frozen=True)
class OciLayoutRef:
    """An OCI image layout directory; ``tag`` is an ``org.opencontainers.image.ref.name``."""

    path: Path
    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        return f"oci:{self.path}" + (f"@{self.digest}" if self.digest else f":{self.tag}" if self.tag else "")

    @property
    def name(self) -> str:
        """The name recorded as ``org.opencontainers.image.base.name`` (absolute path, tag kept)."""
        return str(OciLayoutRef(self.path.absolute(), self.tag, self.digest))


@dataclass(frozen=True)
class DockerArchiveRef:
    """A ``docker save`` / ``skopeo copy … docker-archive:`` tarball holding one image."""

    path: Path

    def __str__(self) -> str:
        return f"docker-archive:{self.path}"

    @property
    def name(self) -> str:
        return f"docker-archive:{self.path.absolute()}"


@dataclass(frozen=True)
class RegistryRef:
    """An image in an OCI Distribution registry (a forkd hub, docker-registry, any other)."""

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest when pinned, else the tag (default ``latest``)."""
        return self.digest or self.tag or DEFAULT_TAG

    def __str__(self) -> str:
        return (
            f"{self.host}/{self.repository}"
            + (f":{self.tag}" if self.tag else "")
            + (f"@{self.digest}" if self.digest else "")
        )

    @property
    def name(self) -> str:
        """``HOST/repo:tag`` (or ``HOST/repo@digest`` when pinned without a tag)."""
        return f"{self.host}/{self.repository}" + (
            f":{self.tag}" if self.tag else f"@{self.digest}" if self.digest else f":{DEFAULT_TAG}"
        )

    @property
    def hostname(self) -> str:
        """The host without its port (brackets of an IPv6 address removed)."""
        host = self.host
        if host.startswith("["):
            return host[1 : host.index("]")]
        return host.rsplit(":", 1)[0]

    def is_loopback(self) -> bool:
        return is_loopback_host(self.hostname)

    def base_url(self, insecure: Collection[str] | None = None) -> str:
        """``http://HOST`` for loopback hosts and hosts in ``insecure`` (default: ``FORKD_INSECURE_REGISTRIES``),
        else ``https://HOST``."""
        allowed = insecure_registries() if insecure is None else insecure
        plain = self.is_loopback() or self.host in allowed or self.hostname in allowed
        return f"{'http' if plain else 'https'}://{self.host}"


ImageRef = OciLayoutRef | DockerArchiveRef | RegistryRef


def is_loopback_host(hostname: str) -> bool:
    """``localhost``, 127.0.0.0/8 or ``::1`` (by address, never by a DNS lookup)."""
    if hostname.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname.strip("[]")).is_loopback
    except ValueError:
        return False


def insecure_registries(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The ``host[:port]`` names ``FORKD_INSECURE_REGISTRIES`` allows plain http for."""
    text = (os.environ if env is None else env).get(INSECURE_ENV, "")
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def parse_image_reference(text: str) -> ImageRef:
    """Parse an image source string. Raises InvalidImageReference naming what is wrong."""
    if not isinstance(text, str) or not text.strip() or len(text) > 4096 or "\x00" in text:
        raise InvalidImageReference(
            f"invalid image reference {text!r}: want oci:DIR[:tag], docker-archive:FILE or HOST[:PORT]/repo[:tag|@sha256:…]"
        )
    if text.startswith("oci:"):
        return _parse_layout(text)
    if text.startswith("docker-archive:"):
        path = text.removeprefix("docker-archive:")
        if not path:
            raise InvalidImageReference(f"invalid image reference {text!r}: docker-archive: needs a FILE")
        return DockerArchiveRef(Path(path))
    return _parse_registry(text)


def _parse_layout(text: str) -> OciLayoutRef:
    rest = text.removeprefix("oci:")
    digest = None
    if "@" in rest:
        rest, digest = rest.rsplit("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise InvalidImageReference(f"invalid image reference {text!r}: {digest!r} is not sha256:<64 hex>")
    path, _, tag = rest.partition(":")
    if not path:
        raise InvalidImageReference(f"invalid image reference {text!r}: oci: needs a DIR")
    if tag and digest:
        raise InvalidImageReference(f"invalid image reference {text!r}: give a tag or a digest, not both")
    if tag and not _REF_NAME.fullmatch(tag):
        raise InvalidImageReference(f"invalid image reference {text!r}: {tag!r} is not a valid layout ref name")
    return OciLayoutRef(Path(path), tag or None, digest)


def _parse_registry(text: str) -> RegistryRef:
    rest = text.removeprefix("docker://")
    if any(c.isspace() for c in rest):
        raise InvalidImageReference(f"invalid image reference {text!r}: spaces are not allowed")
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise InvalidImageReference(
                f"invalid image reference {text!r}: {digest!r} is not a digest (want sha256:<64 lowercase hex>)"
            )
    host, slash, path = rest.partition("/")
    if not slash or not ("." in host or ":" in host or host == "localhost" or host.startswith("[")):
        raise InvalidImageReference(
            f"invalid image reference {text!r}: name the registry: HOST[:PORT]/repo[:tag] "
            "(there is no default registry), or use oci:DIR / docker-archive:FILE"
        )
    if not _HOST.fullmatch(host):
        raise InvalidImageReference(f"invalid image reference {text!r}: bad registry host {host!r}")
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise InvalidImageReference(f"invalid image reference {text!r}: bad tag {tag!r}")
    components = path.split("/")
    bad = next((c for c in components if not _COMPONENT.fullmatch(c)), None)
    if bad is not None:
        raise InvalidImageReference(
            f"invalid image reference {text!r}: repository component {bad!r} must be lowercase letters and digits "
            "joined by . _ __ or -"
        )
    if len(host) + 1 + len(path) > 255:
        raise InvalidImageReference(f"invalid image reference {text!r}: the name is longer than 255 characters")
    return RegistryRef(host, path, tag, digest)
