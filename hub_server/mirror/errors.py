"""The mirror's errors. Each becomes the hub's error envelope (``{"errors": [...]}``) with its own status.

``MirrorError`` (a ``HubError`` whose status is given, not taken from the error table): writes refused
(405 ``UNSUPPORTED``), the upstream unreachable (503 ``UNAVAILABLE``), bytes from the upstream that do not
match their digest (502 ``DIGEST_INVALID``). ``UpstreamRefusal``: the upstream's own refusal (401, 403, 404 …),
relayed with its status, body and challenge.
"""

from __future__ import annotations

from typing import Any

from hub_server.errors import ErrorCode, HubError

__all__ = ["MirrorError", "UpstreamRefusal", "unreachable"]


class MirrorError(HubError):
    """A ``HubError`` with an explicit HTTP status."""

    def __init__(
        self,
        code: ErrorCode,
        status: int,
        message: str,
        detail: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(code, message, detail, headers=headers)
        self._status = status

    @property
    def status(self) -> int:
        return self._status


class UpstreamRefusal(Exception):
    """The upstream refused a request (a 4xx): the mirror answers the same (status, body, headers)."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        super().__init__(f"the upstream answered {status}")
        self.status = status
        self.body = body
        self.headers = headers


def unreachable(upstream: str, why: str) -> MirrorError:
    """503: what was asked is not cached (or not fresh enough) and the upstream cannot be asked."""
    return MirrorError(
        ErrorCode.UNAVAILABLE,
        503,
        f"this mirror cannot reach its upstream {upstream} ({why}) and has no usable cached answer",
        {"dependency": "upstream", "upstream": upstream},
        headers={"Retry-After": "30"},
    )
