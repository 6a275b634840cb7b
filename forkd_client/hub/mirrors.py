"""Registry mirrors for the client: which mirrors to read a hub through (like Docker's ``registry-mirrors``).

Where they are configured (the environment wins over the file, as a whole)::

    FORKD_HUB_MIRRORS="https://hub.example=http://m1:5001,http://m2:5001 https://other.example=http://m3"

    # $XDG_CONFIG_HOME/forkd/config.toml (default ~/.config/forkd/config.toml)
    [mirrors]
    "https://hub.example" = ["http://m1:5001", "http://m2:5001"]

Hub and mirror URLs are compared as :func:`.credentials.normalize_url` writes them (no trailing slash).
``forkd pull`` (and ``inspect``) send their reads (GET and HEAD of the hub's URLs) to the first mirror that
answers, with the hub's credentials (the mirror checks them with the hub). A mirror that is unreachable or
answers 5xx is skipped for the rest of the command and the read goes to the next mirror, then to the hub
itself. Pushes never use mirrors. :class:`MirrorRoute` is what :class:`~.client.HubClient` consults per read.

Errors: ``MirrorConfigError`` (a ``HubError``) naming the variable or the file and key that is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from .configfile import config_file, read_table
from .credentials import normalize_url
from .errors import HubError

__all__ = ["MIRRORS_ENV", "MirrorConfigError", "MirrorRoute", "config_file", "load_mirrors", "mirrors_for"]

MIRRORS_ENV = "FORKD_HUB_MIRRORS"


class MirrorConfigError(HubError):
    """The mirror configuration is malformed; the message names where."""


def _url(text: object, where: str) -> str:
    if not isinstance(text, str):
        raise MirrorConfigError(f"{where}: {text!r} is not a URL")
    try:
        return normalize_url(text)
    except HubError as e:
        raise MirrorConfigError(f"{where}: {e}") from None


def parse_env(value: str) -> dict[str, list[str]]:
    """``HUB=MIRROR[,MIRROR…]`` entries separated by spaces."""
    out: dict[str, list[str]] = {}
    for entry in value.split():
        hub, sep, mirrors = entry.partition("=")
        if not sep or not hub or not mirrors:
            raise MirrorConfigError(f"{MIRRORS_ENV}: {entry!r} is not HUB_URL=MIRROR_URL[,MIRROR_URL…]")
        out[_url(hub, MIRRORS_ENV)] = [_url(m, MIRRORS_ENV) for m in mirrors.split(",") if m]
    return out


def parse_file(path: Path) -> dict[str, list[str]]:
    """The ``[mirrors]`` table of ``path`` (none when the file does not exist)."""
    table = read_table(path, "mirrors", MirrorConfigError, "a table of HUB_URL = [MIRROR_URL, …]")
    out: dict[str, list[str]] = {}
    for hub, mirrors in table.items():
        where = f"{path}: mirrors.{hub!r}"
        if isinstance(mirrors, str):
            mirrors = [mirrors]
        if not isinstance(mirrors, list):
            raise MirrorConfigError(f"{where}: expected a list of mirror URLs, not {mirrors!r}")
        out[_url(hub, where)] = [_url(m, where) for m in mirrors]
    return out


def load_mirrors(env: Mapping[str, str] | None = None, path: Path | None = None) -> dict[str, list[str]]:
    """Hub URL → its mirrors, from ``FORKD_HUB_MIRRORS`` when set (non-empty), else from the config file."""
    env = os.environ if env is None else env
    if env.get(MIRRORS_ENV, "").strip():
        return parse_env(env[MIRRORS_ENV])
    return parse_file(path or config_file())


def mirrors_for(hub: str, env: Mapping[str, str] | None = None, path: Path | None = None) -> list[str]:
    """The mirrors configured for ``hub`` (in order), none when there are none. Raises MirrorConfigError."""
    return load_mirrors(env, path).get(normalize_url(hub), [])


class MirrorRoute:
    """Where the reads of one command go: the first live mirror, then the hub. Shared by the pull's threads: each
    update is one list append or assignment, and a race only sends one more read to a mirror that just failed."""

    def __init__(self, hub: str, mirrors: Sequence[str]) -> None:
        self.hub = hub.rstrip("/")
        self.mirrors = [m.rstrip("/") for m in mirrors]
        self.skipped: list[str] = []
        self.served_by: str | None = None
        """The mirror that served the last read sent through one (``None``: the hub served them all)."""

    def live(self) -> list[str]:
        return [m for m in self.mirrors if m not in self.skipped]

    def skip(self, mirror: str) -> None:
        if mirror not in self.skipped:
            self.skipped.append(mirror)

    def rebase(self, url: str, mirror: str) -> str | None:
        """``url`` on ``mirror`` when it is one of the hub's URLs, else ``None``."""
        if url == self.hub or url.startswith(self.hub + "/"):
            return mirror + url[len(self.hub) :]
        return None
