"""Hub credentials in the XDG config dir, with environment overrides.

``$XDG_CONFIG_HOME/forkd/credentials.json`` (default ``~/.config/forkd``), mode 0600::

    {"default": "http://127.0.0.1:8080", "hubs": {"http://127.0.0.1:8080": {"token": "fkd_…"}}}

``FORKD_HUB_URL`` overrides the default hub and ``FORKD_TOKEN`` the token, everywhere.
The file is written atomically (temp file + rename) and never made group- or world-readable.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from manifest.fileops import write_atomically

from .errors import HubError


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "forkd"


def normalize_url(url: str) -> str:
    """``http(s)://host[:port][/path]`` without a trailing slash; a bare host gets ``https://``."""
    url = url.strip()
    url = url.split("://", 1)[0] + "://" + url.split("://", 1)[1].rstrip("/") if "://" in url else url.rstrip("/")
    if "://" not in url:
        host = url.split("/")[0].rsplit(":", 1)[0]
        url = ("http://" if host in ("localhost",) or host.startswith("127.") else "https://") + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HubError(f"invalid hub URL {url!r}: want http(s)://host[:port]")
    return url


@dataclass(frozen=True)
class HubLogin:
    url: str | None
    token: str | None


class Credentials:
    """Read and write the credentials file (path injectable for tests)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or config_dir() / "credentials.json"

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"hubs": {}}
        except (OSError, ValueError) as e:
            raise HubError(f"cannot read credentials file {self.path}: {e}") from None
        hubs = data.get("hubs", {}) if isinstance(data, dict) else None
        if (
            not isinstance(hubs, dict)
            or not all(isinstance(v, dict) for v in hubs.values())
            or not isinstance(data.get("default", ""), (str, type(None)))
        ):
            raise HubError(f"credentials file {self.path} is malformed; remove it and log in again")
        data.setdefault("hubs", {})
        return data

    def _save(self, data: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomically(self.path, json.dumps(data, indent=2), perms=0o600)

    def login(self, url: str, token: str, *, make_default: bool = False) -> str:
        """Store ``token`` for ``url``; it becomes the default hub when there is none yet or
        ``make_default`` (a later login never changes the default silently). Returns the URL."""
        url = normalize_url(url)
        data = self._load()
        data["hubs"][url] = {"token": token}
        if make_default or not data.get("default"):
            data["default"] = url
        self._save(data)
        return url

    def default(self) -> str | None:
        """The default hub of the stored logins (FORKD_HUB_URL, when set, overrides it)."""
        return self._load().get("default")

    def logout(self, url: str | None = None) -> str | None:
        data = self._load()
        target = normalize_url(url) if url else data.get("default")
        if not target or target not in data["hubs"]:
            return None
        del data["hubs"][target]
        if data.get("default") == target:
            data["default"] = next(iter(data["hubs"]), None)
        self._save(data)
        return target

    def resolve(self, url: str | None = None) -> HubLogin:
        """The hub URL and token to use: explicit URL, else FORKD_HUB_URL, else the default login;
        the token from FORKD_TOKEN, else the stored one for that URL."""
        data = self._load()
        chosen = url or os.environ.get("FORKD_HUB_URL") or data.get("default")
        chosen = normalize_url(chosen) if chosen else None
        token = os.environ.get("FORKD_TOKEN") or (data["hubs"].get(chosen, {}).get("token") if chosen else None)
        return HubLogin(chosen, token or None)
