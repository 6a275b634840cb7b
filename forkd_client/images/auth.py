"""Registry credentials and the ``WWW-Authenticate`` challenge (Docker token auth, Basic).

Credentials for a registry host come from, in order:

1. the forkd hub login ``forkd login`` stored for ``http(s)://HOST`` (:mod:`forkd_client.hub.credentials`),
   sent as Basic ``forkd:<token>`` (a forkd hub takes any user name with the token as password).
   ``FORKD_TOKEN`` is used only for the hub ``FORKD_HUB_URL`` (or the default login) names: it is never
   sent to another registry;
2. the ``auths`` of a containers auth file (``$REGISTRY_AUTH_FILE``, else
   ``$XDG_RUNTIME_DIR/containers/auth.json``, what ``skopeo login`` / ``podman login`` write), then of
   docker's ``~/.docker/config.json``: the base64 ``auth`` field only (credential helpers are not run).

Errors: :class:`~forkd_client.images.errors.InvalidSetting` for an unreadable credentials file.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import ClientError
from ..hub.credentials import Credentials, normalize_url
from .errors import InvalidSetting

_PARAM = re.compile(r'\s*([A-Za-z][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))\s*,?')


@dataclass(frozen=True)
class BasicCredentials:
    username: str
    password: str

    def header(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()

    def __repr__(self) -> str:  # never print the secret
        return f"BasicCredentials({self.username!r}, ***)"


@dataclass(frozen=True)
class Challenge:
    scheme: str  # lowercase: "bearer" or "basic"
    params: dict[str, str]


def parse_challenge(header: str) -> Challenge | None:
    """The first challenge of a ``WWW-Authenticate`` value (``Bearer realm="…",service="…",scope="…"``)."""
    scheme, _, rest = header.strip().partition(" ")
    if not scheme:
        return None
    params: dict[str, str] = {}
    pos = 0
    while pos < len(rest):
        match = _PARAM.match(rest, pos)
        if not match or match.end() == pos:
            break
        value = match.group(2) if match.group(2) is not None else match.group(3)
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
        pos = match.end()
    return Challenge(scheme.lower(), params)


def registry_credentials(host: str) -> BasicCredentials | None:
    """The credentials stored for registry ``host`` (``host[:port]``), or None. Raises InvalidSetting."""
    token = _forkd_token(host)
    if token:
        return BasicCredentials("forkd", token)
    for path in _auth_files():
        found = _from_auth_file(path, host)
        if found is not None:
            return found
    return None


def _forkd_token(host: str) -> str | None:
    try:
        store = Credentials()
        env_token = os.environ.get("FORKD_TOKEN")
        if env_token:
            hub = os.environ.get("FORKD_HUB_URL") or store.default()
            return env_token if hub and urlsplit(normalize_url(hub)).netloc == host else None
        for scheme in ("http", "https"):
            login = store.resolve(f"{scheme}://{host}")
            if login.token:
                return login.token
    except ClientError as e:
        raise InvalidSetting(f"cannot read the forkd credentials: {e}") from None
    return None


def _auth_files() -> list[Path]:
    files = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        files.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    elif os.environ.get("XDG_RUNTIME_DIR"):
        files.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    files.append(Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json")
    return files


def _from_auth_file(path: Path, host: str) -> BasicCredentials | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise InvalidSetting(f"cannot read registry credentials from {path}: {e}") from None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        name = urlsplit(key).netloc if "://" in key else key.split("/")[0]
        if name != host or not isinstance(entry, dict) or not isinstance(entry.get("auth"), str):
            continue
        try:
            user, sep, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise InvalidSetting(f"{path}: the auth of {key!r} is not base64 of user:password") from None
        if sep:
            return BasicCredentials(user, password)
    return None
