"""References to snapshots on a hub: ``[HOST[:PORT]/]namespace/repo[:tag][@digest]``.

Docker's grammar, restricted to our two-level names: the first component is a host when it
contains ``.`` or ``:`` or is ``localhost``; the tag defaults to ``latest``; a digest pins the
exact bytes (``name@digest`` always means the same snapshot). :meth:`Reference.hub_url` decides
which hub to talk to; :class:`Reference` also builds every URL path the client uses.

Errors: :class:`~forkd_client.hub.errors.InvalidReference`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from manifest.digest import is_digest

from .errors import InvalidReference

DEFAULT_TAG = "latest"
_COMPONENT = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_HOST = re.compile(r"(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?")


@dataclass(frozen=True)
class Reference:
    """A parsed reference. ``host`` is None when the hub comes from configuration."""

    namespace: str
    repository: str
    tag: str | None = None
    digest: str | None = None
    host: str | None = None

    @property
    def name(self) -> str:
        """``namespace/repo``."""
        return f"{self.namespace}/{self.repository}"

    @property
    def ref(self) -> str:
        """What to ask the hub for: the digest when pinned, else the tag (default ``latest``)."""
        return self.digest or self.tag or DEFAULT_TAG

    def __str__(self) -> str:
        text = f"{self.host}/{self.name}" if self.host else self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def with_tag(self, tag: str) -> Reference:
        return Reference(self.namespace, self.repository, tag, None, self.host)

    def hub_url(self, default: str | None) -> str:
        """The hub base URL: ``default`` (FORKD_HUB_URL or the login) when its host matches or
        the reference names no host; else ``http://`` for loopback hosts and ``https://`` otherwise."""
        if self.host is None:
            if not default:
                raise InvalidReference(
                    f"{self}: no hub given: put HOST/ in front, run 'forkd login URL' or set FORKD_HUB_URL"
                )
            return default.rstrip("/")
        if default and urlsplit(default).netloc == self.host:
            return default.rstrip("/")
        hostname = self.host.rsplit(":", 1)[0] if not self.host.startswith("[") else self.host
        loopback = hostname in ("localhost", "[::1]") or hostname.startswith("127.")
        return f"{'http' if loopback else 'https'}://{self.host}"

    @classmethod
    def parse(cls, text: str, *, require_tag_or_digest: bool = False) -> Reference:
        """Parse a reference string. Raises InvalidReference naming what is wrong."""
        if not isinstance(text, str) or not text or len(text) > 512 or any(c.isspace() for c in text):
            raise InvalidReference(f"invalid reference {text!r}: expected [HOST[:PORT]/]namespace/repo[:tag][@digest]")
        rest, digest = text, None
        if "@" in rest:
            rest, digest = rest.split("@", 1)
            if not is_digest(digest):
                raise InvalidReference(
                    f"invalid reference {text!r}: {digest!r} is not a digest (want blake3:<64 hex> or sha256:<64 hex>)"
                )
        parts = rest.split("/")
        host = None
        if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
            host = parts.pop(0)
            if not _HOST.fullmatch(host):
                raise InvalidReference(f"invalid reference {text!r}: bad host {host!r}")
        elif len(parts) == 3:
            raise InvalidReference(
                f"invalid reference {text!r}: {parts[0]!r} is not a host (a host has a '.' or "
                f"a ':' or is 'localhost'); the name must be namespace/repo"
            )
        if len(parts) != 2:
            raise InvalidReference(f"invalid reference {text!r}: the name must be namespace/repo")
        namespace, repo = parts
        tag = None
        if ":" in repo:
            repo, tag = repo.rsplit(":", 1)
            if not _TAG.fullmatch(tag):
                raise InvalidReference(f"invalid reference {text!r}: bad tag {tag!r}")
        for label, value in (("namespace", namespace), ("repository", repo)):
            if len(value) > 64 or not _COMPONENT.fullmatch(value):
                raise InvalidReference(
                    f"invalid reference {text!r}: {label} {value!r} must be lowercase letters, digits and . _ - separators"
                )
        if require_tag_or_digest and not (tag or digest):
            tag = DEFAULT_TAG
        return cls(namespace, repo, tag, digest, host)
