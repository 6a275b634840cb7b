"""The HTTP client for the upstream hub: every request carries the *client's* ``Authorization`` (the mirror has no
credential of its own), has timeouts, and is bounded in what it reads into memory.

``Upstream.get(path, authorization)`` returns the upstream's answer as an :class:`Answer` (status, headers, body
of at most ``max_bytes``); ``Upstream.stream(path, authorization)`` opens a blob download that follows the
upstream's 307 to a presigned store URL (httpx drops ``Authorization`` on a cross-origin redirect) and asks for
plain bytes (``Accept: application/octet-stream``, never the fetch-plan type).

Errors: ``Unreachable`` (connection refused, timeout, a broken answer, a 5xx or 429, an answer over ``max_bytes``): the
caller falls back to its cache or answers 503 naming the upstream. httpx errors never leave this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["RELAYED_HEADERS", "Answer", "Unreachable", "Upstream"]

#: Headers of an upstream answer the mirror relays to its client (besides the body).
RELAYED_HEADERS = (
    "content-type",
    "docker-content-digest",
    "www-authenticate",
    "retry-after",
    "link",
    "oci-filters-applied",
    "docker-distribution-api-version",
    "cache-control",
)

MAX_DOC_BYTES = 64 << 20
MAX_REFUSAL_BYTES = 64 << 10


class Unreachable(Exception):
    """The upstream did not answer usefully (the message says why, in a few words)."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def relayed_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k in RELAYED_HEADERS}


def _why(e: httpx.HTTPError) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


class Upstream:
    """One upstream hub at ``url`` (``http://host:port``)."""

    def __init__(self, url: str, *, timeout: float = 30.0, http: httpx.AsyncClient | None = None) -> None:
        self.url = url.rstrip("/")
        self._http = http or httpx.AsyncClient(
            base_url=self.url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            follow_redirects=False,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    async def close(self) -> None:
        await self._http.aclose()

    @staticmethod
    def _headers(authorization: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = dict(extra or {})
        if authorization:
            headers["Authorization"] = authorization
        return headers

    async def request(
        self,
        method: str,
        path: str,
        authorization: str | None,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | tuple[tuple[str, str], ...] | None = None,
        content: bytes | None = None,
        max_bytes: int = MAX_DOC_BYTES,
        wait: float | None = None,
    ) -> Answer:
        """One request (``wait``: its timeout in seconds, instead of the client's); 5xx and transport failures raise
        ``Unreachable``, 2xx–4xx return."""
        extra: dict[str, Any] = {} if wait is None else {"timeout": wait}
        try:
            async with self._http.stream(
                method,
                path,
                headers=self._headers(authorization, headers),
                params=params,
                content=content,
                **extra,
            ) as r:
                _check_transient(r)
                body = bytearray()
                async for piece in r.aiter_bytes():
                    body += piece
                    if len(body) > max_bytes:
                        raise Unreachable(f"its answer to {method} {path} is over {max_bytes:,} bytes")
                return Answer(r.status_code, {k.lower(): v for k, v in r.headers.items()}, bytes(body))
        except httpx.HTTPError as e:
            raise Unreachable(_why(e)) from None

    async def get(self, path: str, authorization: str | None, **kw: object) -> Answer:
        return await self.request("GET", path, authorization, **kw)  # type: ignore[arg-type]

    @contextlib.asynccontextmanager
    async def stream(self, path: str, authorization: str | None) -> AsyncIterator[tuple[Answer, AsyncIterator[bytes]]]:
        """A blob download: ``(answer without body, chunks)``; the chunks are only meaningful on a 200.

        A refusal (4xx) is read into ``answer.body`` (bounded) and the chunks are empty."""
        headers = self._headers(authorization, {"Accept": "application/octet-stream"})
        try:
            async with self._http.stream("GET", path, headers=headers, follow_redirects=True) as r:
                _check_transient(r)
                head = {k.lower(): v for k, v in r.headers.items()}
                for hop in r.history:  # the hub's own headers on its 307 (a pack's X-Checksum-Sha256)
                    for k, v in hop.headers.items():
                        head.setdefault(f"hop-{k.lower()}", v)
                if r.status_code != 200:
                    body = bytearray()
                    async for piece in r.aiter_bytes():
                        body += piece
                        if len(body) > MAX_REFUSAL_BYTES:
                            break
                    yield Answer(r.status_code, head, bytes(body[:MAX_REFUSAL_BYTES])), _nothing()
                    return
                yield Answer(200, head, b""), _chunks(r)
        except httpx.HTTPError as e:
            raise Unreachable(_why(e)) from None


def _check_transient(r: httpx.Response) -> None:
    """A 5xx, or a 429 (the upstream's rate limit: it sees every client of the mirror at the mirror's address), is
    no answer about the content or the credential: never cached, never relayed as a refusal."""
    if r.status_code >= 500:
        raise Unreachable(f"it answered {r.status_code}")
    if r.status_code == 429:
        raise Unreachable(f"it is rate-limiting this mirror (429, Retry-After {r.headers.get('retry-after', '?')})")


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover - makes this an async generator


async def _chunks(r: httpx.Response) -> AsyncIterator[bytes]:
    async for piece in r.aiter_bytes(1 << 20):
        yield piece
