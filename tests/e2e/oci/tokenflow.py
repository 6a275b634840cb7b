"""OCI clients that authenticate through the Docker token flow the way real ones do, for the conformance tests.

Two behaviours, read from the clients' code (distribution-spec's conformance/api.go; go-containerregistry's
pkg/v1/remote/transport/bearer.go):

- :class:`SuiteClient`, the conformance suite: one cached ``Authorization`` per (repository, method class:
  ``pull`` for GET/HEAD, ``push`` for POST/PATCH/PUT, ``DELETE``); on a 401 it asks the realm for a token with
  exactly the challenge's ``scope``, caches it under that key and retries once. A 403 is final.
- :class:`CraneClient`, crane: a transport per repository holding a list of scopes (``push,pull`` to write
  and to delete); on a 401 it adds the challenge's ``scope`` to the list, asks for a token with all of them
  and retries once. A 403 is final.

Both send the API token as the Basic password to the realm, as ``--creds user:token`` does.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = ["CraneClient", "SuiteClient", "anonymous_status", "challenge_of", "registry_token"]

_PARAM = re.compile(r'(\w+)="([^"]*)"')
_REPO = re.compile(r"^/v2/(.+?)/(?:blobs|manifests|tags|referrers)/")


def challenge_of(response: httpx.Response) -> dict[str, str]:
    """The parameters of a ``Bearer`` challenge (``realm``, ``service``, ``scope``, ``error``); {} when none."""
    header = response.headers.get("WWW-Authenticate", "")
    if not header.lower().startswith("bearer "):
        return {}
    return dict(_PARAM.findall(header))


def registry_token(url: str, user: str, password: str, *scopes: str) -> str:
    """A registry token for ``scopes`` from the hub's token endpoint (Basic ``user:password``)."""
    r = httpx.get(f"{url}/v2/token", params=[("scope", s) for s in scopes], auth=(user, password), timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["token"]


def anonymous_status(url: str, method: str, path: str) -> int:
    """The status of ``method path`` sent without credentials."""
    return httpx.request(method, f"{url}{path}", timeout=60).status_code


class _TokenFlow:
    def __init__(self, url: str, user: str, password: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=120)
        self.auth = (user, password)
        self.token_requests: list[list[str]] = []  # the scopes of every token asked for, in order

    def close(self) -> None:
        self.http.close()

    def _token(self, challenge: dict[str, str], scopes: list[str]) -> str:
        params = [("service", challenge.get("service", ""))] + [("scope", s) for s in scopes]
        self.token_requests.append(scopes)
        r = self.http.get(challenge["realm"], params=params, auth=self.auth)
        assert r.status_code == 200, r.text
        body = r.json()
        return body.get("token") or body["access_token"]


class SuiteClient(_TokenFlow):
    """The conformance suite's authentication (module docstring)."""

    def __init__(self, url: str, user: str, password: str) -> None:
        super().__init__(url, user, password)
        self.cache: dict[str, str] = {}

    @staticmethod
    def _key(method: str, path: str) -> str:
        match = _REPO.match(urlsplit(path).path)
        repo = match.group(1) if match else ""
        kind = {"GET": "pull", "HEAD": "pull", "POST": "push", "PATCH": "push", "PUT": "push"}.get(method, method)
        return f"{repo}:{kind}"

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        key = self._key(method, path)
        headers = dict(kwargs.pop("headers", {}) or {})
        if key in self.cache:
            headers["Authorization"] = self.cache[key]
        r = self.http.request(method, path, headers=headers, **kwargs)
        challenge = challenge_of(r) if r.status_code == 401 else {}
        if challenge:
            self.cache[key] = "Bearer " + self._token(challenge, [challenge["scope"]] if "scope" in challenge else [])
            headers["Authorization"] = self.cache[key]
            r = self.http.request(method, path, headers=headers, **kwargs)
        return r


class CraneClient(_TokenFlow):
    """crane's authentication for one repository, starting from ``scopes`` (module docstring)."""

    def __init__(self, url: str, user: str, password: str, scopes: list[str]) -> None:
        super().__init__(url, user, password)
        self.scopes = list(scopes)
        self.bearer: str | None = None

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        if self.bearer is None:  # crane pings /v2/ first to learn the realm, then exchanges its scopes
            ping = self.http.get("/v2/")
            self.bearer = self._token(challenge_of(ping), self.scopes)
        headers["Authorization"] = f"Bearer {self.bearer}"
        r = self.http.request(method, path, headers=headers, **kwargs)
        challenge = challenge_of(r) if r.status_code == 401 else {}
        if challenge:
            if challenge.get("scope") and challenge["scope"] not in self.scopes:
                self.scopes.insert(0, challenge["scope"])
            self.bearer = self._token(challenge, self.scopes)
            headers["Authorization"] = f"Bearer {self.bearer}"
            r = self.http.request(method, path, headers=headers, **kwargs)
        return r
