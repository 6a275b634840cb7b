"""An OCI Distribution registry (a forkd hub, docker-registry, any other) as an image source.

Requests go out anonymously first. A 401 is answered the way docker and skopeo do: a ``Bearer`` challenge
sends the client to the token endpoint its ``realm`` names (with ``service`` and ``scope``, Basic
credentials when :mod:`.auth` has some for the host) and retries with the token; a ``Basic`` challenge
retries with the credentials. A token realm must use https unless its host is loopback or allowed plain
http (``FORKD_INSECURE_REGISTRIES``), so credentials never cross the network in clear text. Blob downloads
follow redirects (presigned storage URLs); httpx drops the ``Authorization`` header when a redirect leaves
the registry's origin. Every request has a timeout; bodies are streamed, never held whole (manifests are
read up to their size limit).

Errors: :class:`ImageNotFound` (404), :class:`RegistryAuthFailed` (401/403 after the challenge flow, a
token endpoint that refuses), :class:`RegistryUnreachable` (no answer, TLS, timeout),
:class:`RegistryError` (any other status), :class:`LimitExceeded` (a manifest over its limit).
httpx errors never leave this module.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterator
from urllib.parse import urlsplit

from ..hub.lean_httpx import httpx
from .auth import BasicCredentials, parse_challenge, registry_credentials
from .errors import ImageNotFound, LimitExceeded, RegistryAuthFailed, RegistryError, RegistryUnreachable
from .manifests import ACCEPT, Descriptor
from .reference import RegistryRef, insecure_registries, is_loopback_host

TIMEOUT = httpx.Timeout(60.0, connect=10.0)
_CHUNK = 1 << 20


class RegistrySource:
    """Reads manifests and blobs of one registry reference. ``credentials`` default to :mod:`.auth`'s."""

    def __init__(
        self,
        ref: RegistryRef,
        *,
        http: httpx.Client | None = None,
        insecure: Collection[str] | None = None,
        credentials: BasicCredentials | None = None,
    ) -> None:
        self.ref = ref
        self.name = ref.name
        self.insecure = insecure_registries() if insecure is None else frozenset(insecure)
        self.base = ref.base_url(self.insecure)
        self._own_http = http is None
        self.http = http or httpx.Client(timeout=TIMEOUT, follow_redirects=False)
        self._credentials = credentials
        self._credentials_looked_up = credentials is not None
        self._authorization: str | None = None

    def close(self) -> None:
        if self._own_http:
            self.http.close()

    def __enter__(self) -> RegistrySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read_manifest(self, digest: str | None, limit: int) -> tuple[bytes, str | None, str | None]:
        """``(bytes, content type, digest they must have)`` of the reference's manifest (``digest`` None)
        or of manifest ``digest``."""
        reference = digest or self.ref.reference
        url = f"{self.base}/v2/{self.ref.repository}/manifests/{reference}"
        with self._get(url, {"Accept": ACCEPT}, f"manifest {reference}") as response:
            body = bytearray()
            for chunk in _chunks(response):
                body += chunk
                if len(body) > limit:
                    raise LimitExceeded(
                        f"{self.name}: manifest {reference} is larger than {limit} bytes", limit="max_manifest_bytes"
                    )
            header = response.headers.get("docker-content-digest", "")
            expected = (
                reference if reference.startswith("sha256:") else header if header.startswith("sha256:") else None
            )
            return bytes(body), response.headers.get("content-type"), expected

    @contextlib.contextmanager
    def open_blob(self, desc: Descriptor) -> Iterator[Iterator[bytes]]:
        """The blob's bytes in chunks (redirects followed)."""
        url = f"{self.base}/v2/{self.ref.repository}/blobs/{desc.digest}"
        with self._get(url, {}, f"blob {desc.digest}", follow=True) as response:
            yield _chunks(response)

    # --- requests and the challenge flow ------------------------------------------------------------

    @contextlib.contextmanager
    def _get(self, url: str, headers: dict[str, str], what: str, *, follow: bool = False) -> Iterator[httpx.Response]:
        response = self._send(url, headers, follow)
        if response.status_code == 401:
            challenge = response.headers.get("www-authenticate", "")
            response.close()
            self._authenticate(challenge, what)
            response = self._send(url, headers, follow)
        try:
            self._check(response, what)
            yield response
        finally:
            response.close()

    def _send(self, url: str, headers: dict[str, str], follow: bool) -> httpx.Response:
        if self._authorization:
            headers = {**headers, "Authorization": self._authorization}
        try:
            request = self.http.build_request("GET", url, headers=headers)
            return self.http.send(request, stream=True, follow_redirects=follow)
        except httpx.TooManyRedirects:
            raise RegistryError(f"{self.name}: too many redirects fetching {url}") from None
        except httpx.TransportError as e:
            raise RegistryUnreachable(f"{self.name}: no answer from {self.base} ({type(e).__name__}: {e})") from None

    def _check(self, response: httpx.Response, what: str) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        detail = _error_detail(response)
        if status == 404:
            raise ImageNotFound(f"{self.name}: {what} not found on {self.ref.host}{detail}")
        if status in (401, 403):
            hint = "" if self._credentials else " (log in: 'forkd login URL' for a forkd hub, or 'skopeo login')"
            raise RegistryAuthFailed(
                f"{self.name}: {self.ref.host} refused access to {what}{detail}{hint}", status=status
            )
        raise RegistryError(f"{self.name}: {self.ref.host} answered {status} for {what}{detail}", status=status)

    def _creds(self) -> BasicCredentials | None:
        if not self._credentials_looked_up:
            self._credentials = registry_credentials(self.ref.host)
            self._credentials_looked_up = True
        return self._credentials

    def _authenticate(self, header: str, what: str) -> None:
        challenge = parse_challenge(header)
        if challenge is None:
            raise RegistryAuthFailed(
                f"{self.name}: {self.ref.host} wants authentication for {what} but sent no challenge", status=401
            )
        creds = self._creds()
        if challenge.scheme == "basic":
            if creds is None:
                raise RegistryAuthFailed(
                    f"{self.name}: {self.ref.host} wants a user name and password (none stored for it)", status=401
                )
            self._authorization = creds.header()
            return
        if challenge.scheme != "bearer" or "realm" not in challenge.params:
            raise RegistryAuthFailed(f"{self.name}: unsupported authentication challenge {header[:200]!r}", status=401)
        realm = challenge.params["realm"]
        parts = urlsplit(realm)
        host = parts.hostname or ""
        if parts.scheme not in ("http", "https") or not host:
            raise RegistryAuthFailed(
                f"{self.name}: the token realm {realm!r} is not an absolute http(s) URL", status=401
            )
        if parts.scheme == "http" and not (
            is_loopback_host(host) or parts.netloc in self.insecure or host in self.insecure
        ):
            raise RegistryAuthFailed(
                f"{self.name}: refusing to send credentials to the plain-http token realm {realm!r}", status=401
            )
        params = {"scope": challenge.params.get("scope") or f"repository:{self.ref.repository}:pull"}
        if "service" in challenge.params:
            params["service"] = challenge.params["service"]
        headers = {"Authorization": creds.header()} if creds is not None else {}
        try:
            with self.http.stream("GET", realm, params=params, headers=headers) as response:
                status = response.status_code
                detail = _error_detail(response) if status in (401, 403) else ""
                body = _small_body(response) if status == 200 else b""
        except httpx.TransportError as e:
            raise RegistryUnreachable(f"{self.name}: no answer from the token realm {realm} ({e})") from None
        if status in (401, 403):
            raise RegistryAuthFailed(
                f"{self.name}: the token endpoint {realm} refused the credentials{detail}", status=status
            )
        if status != 200:
            raise RegistryError(f"{self.name}: the token endpoint {realm} answered {status}", status=status)
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryAuthFailed(f"{self.name}: the token endpoint {realm} sent no token", status=status)
        self._authorization = f"Bearer {token}"


def _chunks(response: httpx.Response) -> Iterator[bytes]:
    try:
        yield from response.iter_bytes(_CHUNK)
    except httpx.TransportError as e:
        raise RegistryUnreachable(f"the download from {response.url} broke off ({type(e).__name__}: {e})") from None


def _small_body(response: httpx.Response, limit: int = 65536) -> bytes:
    """The body when it is at most ``limit`` bytes, else b"" (never read whole)."""
    body = b""
    for chunk in response.iter_bytes(4096):
        body += chunk
        if len(body) > limit:
            return b""
    return body


def _error_detail(response: httpx.Response) -> str:
    """``: CODE message`` from an OCI error envelope, when the (small) body has one."""
    try:
        error = json.loads(_small_body(response))["errors"][0]
        return f": {error.get('code', '')} {error.get('message', '')}".rstrip()
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, httpx.HTTPError):
        return ""
