"""What the hub client reads off an answer, shared by :class:`~.client.HubClient` and
:class:`~.repository.RepositoryClient`: the error envelope parsed into typed errors, JSON objects,
digests checked, redirects, ``Range`` answers (single, multipart) sliced without copies.

Errors: :mod:`forkd_client.hub.errors`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from manifest.digest import digest_bytes, parse_digest
from manifest.jsontext import loads as loads_json

from .errors import (
    GATEWAY_STATUSES,
    DigestInvalid,
    Forbidden,
    HasDependents,
    HubError,
    NotFound,
    SignatureRequired,
    TagConflict,
    Unauthorized,
    UploadBusy,
)
from .lean_httpx import httpx
from .storeget import slice_ranges

REDIRECTS = (301, 302, 303, 307, 308)


def recipe_path(name: str, location: str) -> str:
    upload_id = location.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return f"/api/v1/repositories/{name}/blobs/uploads/{upload_id}/recipe"


def redirect_target(response: httpx.Response) -> str | None:
    """The absolute URL a redirect points at, or None if ``response`` is not a redirect."""
    if response.status_code not in REDIRECTS or "location" not in response.headers:
        return None
    return str(response.url.join(response.headers["location"]))


def json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    """The JSON object a hub answered with.

    Raises: HubError naming ``what`` when the answer is not a JSON object (invalid, nested
    deeper than the parser follows, or another type).
    """
    try:
        obj = loads_json(response.content)
    except ValueError as e:  # json.JSONDecodeError, JSONTooDeep, UnicodeDecodeError
        raise HubError(f"hub sent an invalid JSON answer for {what}: {e}") from None
    if not isinstance(obj, dict):
        raise HubError(f"hub sent a JSON {type(obj).__name__} for {what}, not an object")
    return obj


def same_origin(url: str, base_url: str) -> bool:
    """Whether absolute ``url`` is on the hub itself (scheme and host:port), where the token may go."""
    a, b = urlsplit(url), urlsplit(base_url)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def verify_digest(data: bytes, digest: str, what: str) -> None:
    want = parse_digest(digest)
    got = digest_bytes(data, want.algorithm)
    if str(got) != digest:
        raise DigestInvalid(f"{what}: digest mismatch: expected {digest}, got {got}", code="DIGEST_INVALID")


def range_end(header: str | None) -> int:
    if not header:
        return 0
    m = re.fullmatch(r"(?:bytes=)?0-(\d+)", header.strip())
    if not m:
        raise HubError(f"hub sent an invalid upload Range header {header!r}")
    return int(m.group(1)) + 1 if header.strip() not in ("0-0",) else 0


def slicer(
    batch: Sequence[tuple[int, int]], bodies: list[memoryview], digest: str
) -> Callable[[Sequence[tuple[int, int]]], list[memoryview]]:
    """A reader of pieces of ``batch`` out of its already received ``bodies`` (views, no copies)."""
    starts = sorted(((o, n, body) for (o, n), body in zip(batch, bodies, strict=True)), key=lambda t: t[0])
    offsets = [o for o, _, _ in starts]

    def read(pieces: Sequence[tuple[int, int]]) -> list[memoryview]:
        out = []
        for offset, size in pieces:
            i = bisect.bisect_right(offsets, offset) - 1
            if i < 0 or offset + size > starts[i][0] + starts[i][1]:
                raise HubError(f"blob {digest}: bytes {offset}-{offset + size - 1} were not asked for")
            out.append(starts[i][2][offset - starts[i][0] : offset - starts[i][0] + size])
        return out

    return read


def split_ranges(r: httpx.Response, batch: Sequence[tuple[int, int]], digest: str) -> list[memoryview]:
    """``batch`` out of an answer to a Range request: a 200 (the hub ignored Range), a single-range
    206 (both :func:`.storeget.slice_ranges`) or a multipart/byteranges 206. Raises HubError."""
    ctype = r.headers.get("content-type", "")
    if r.status_code == 200 or not ctype.startswith("multipart/byteranges"):
        return slice_ranges(
            r.status_code, r.headers.get("content-range"), memoryview(r.content), batch, f"blob {digest}"
        )
    boundary = ctype.split("boundary=", 1)[-1].strip().strip('"').encode()
    parts = _parse_multipart(r.content, boundary)
    out = []
    for o, n in batch:
        data = parts.get(o)
        if data is None or len(data) < n:
            raise HubError(f"blob {digest}: the hub did not return range {o}-{o + n - 1}")
        out.append(data[:n])
    return out


def _parse_multipart(body: bytes, boundary: bytes) -> dict[int, memoryview]:
    """Parse multipart/byteranges by Content-Range lengths (never by searching binary data);
    the parts are views into ``body``."""
    view = memoryview(body)
    parts: dict[int, memoryview] = {}
    delimiter = b"--" + boundary
    pos = body.find(delimiter)
    while pos >= 0:
        pos += len(delimiter)
        if body[pos : pos + 2] == b"--":
            break
        head_end = body.find(b"\r\n\r\n", pos)
        if head_end < 0:
            raise HubError("malformed multipart/byteranges response (no header end)")
        headers = body[pos:head_end].decode("latin-1")
        m = re.search(r"(?im)^content-range:\s*bytes (\d+)-(\d+)/", headers)
        if not m:
            raise HubError("malformed multipart/byteranges response (part without Content-Range)")
        start, end = int(m.group(1)), int(m.group(2))
        data_start = head_end + 4
        parts[start] = view[data_start : data_start + end - start + 1]
        pos = body.find(delimiter, data_start + end - start + 1)
    return parts


#: appended to a 401's message (except during ``forkd login`` itself, which strips it)
LOGIN_HINT = " (run 'forkd login' or set FORKD_TOKEN)"
#: appended to a 404 answered to an anonymous request: the repository may be private
PRIVATE_HINT = " (if it is private, logging in may help: 'forkd login HUB_URL' or FORKD_TOKEN)"


def error_from(response: httpx.Response, method: str, path: str, *, anonymous: bool = False) -> HubError:
    code, message, detail = "UNKNOWN", f"{method} {path} failed with HTTP {response.status_code}", None
    try:
        errors = loads_json(response.content).get("errors") or []
        if errors:
            code = errors[0].get("code", code)
            message = errors[0].get("message") or message
            detail = errors[0].get("detail")
    except (ValueError, AttributeError, TypeError, KeyError):  # not our envelope: keep the HTTP status
        pass
    status = response.status_code
    if code == "UNKNOWN" and status in GATEWAY_STATUSES:  # no envelope (a HEAD, a proxy's own page): say what it means
        message += ": the hub, or what it depends on, is unavailable; retry later"
    cls: type[HubError] = HubError
    if code == "SIGNATURE_REQUIRED":
        cls = SignatureRequired
    elif status == 401:
        cls = Unauthorized
        message += LOGIN_HINT
    elif status == 403:
        cls = Forbidden
    elif status == 404:
        cls = NotFound
        if anonymous and method != "HEAD" and code in ("NAME_UNKNOWN", "MANIFEST_UNKNOWN", "BLOB_UNKNOWN"):
            message += PRIVATE_HINT
    elif status == 409 and code == "HAS_DEPENDENTS":
        cls = HasDependents
    elif status == 409 and code == "TAG_CONFLICT":
        cls = TagConflict
    elif status == 409 and code == "BLOB_UPLOAD_BUSY":
        cls = UploadBusy
    elif code == "DIGEST_INVALID":
        cls = DigestInvalid
    error = cls(message, code=code, status=status, detail=detail)
    error.retry_after = _retry_after(response.headers.get("retry-after"))
    return error


def _retry_after(header: str | None) -> float | None:
    """``Retry-After`` in seconds (the delta form; an HTTP date is ignored), at most an hour."""
    if header is None or not header.strip().isdigit():
        return None
    return min(float(header.strip()), 3600.0)
