"""Who may read what through the mirror: the upstream decides, per credential and repository.

A credential's fingerprint is the sha256 of the client's whole ``Authorization`` header (``anonymous`` without
one); the mirror stores fingerprints, never the header. For each ``(fingerprint, repository)`` it asks the
upstream once — ``GET /v2/<repository>/tags/list?n=1`` with the client's own ``Authorization`` — and keeps the
answer for ``ttl`` seconds (``--mirror-auth-ttl``, default 60): a 2xx is an allow, a 4xx a refusal relayed as the
upstream gave it (status, envelope, challenge). Cached bytes are served only after an allow.

The upstream unreachable (or answering 5xx): an allow younger than ``ttl`` still counts; otherwise the read is
refused with 503 naming the upstream. A refusal is never turned into an allow by an outage.

Errors: ``UpstreamRefusal`` (the upstream's refusal), ``MirrorError`` 503 (``unreachable``).
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from hub_server.mirror.errors import UpstreamRefusal, unreachable
from hub_server.mirror.index import MirrorIndex, StoredAnswer
from hub_server.mirror.metrics import MirrorMetrics
from hub_server.mirror.upstream import Unreachable, Upstream

__all__ = ["AccessChecks", "fingerprint"]


def fingerprint(authorization: str | None) -> str:
    if not authorization:
        return "anonymous"
    return hashlib.sha256(authorization.encode("utf-8", "surrogateescape")).hexdigest()


class AccessChecks:
    def __init__(self, upstream: Upstream, index: MirrorIndex, metrics: MirrorMetrics, *, ttl: float) -> None:
        self.upstream = upstream
        self.index = index
        self.metrics = metrics
        self.ttl = ttl
        self._flights: dict[tuple[str, str], asyncio.Task[StoredAnswer]] = {}
        self._pruned = 0.0

    async def require(self, authorization: str | None, repository: str) -> None:
        """Return when the upstream lets this credential read ``repository``; raise its refusal otherwise."""
        fp = fingerprint(authorization)
        now = time.time()
        known = await self.index.answer(fp, repository)
        if known is None or now - known.checked >= self.ttl:
            await self._prune(now)
            try:
                known = await self._ask(fp, authorization, repository)
            except Unreachable as e:  # an allow younger than the TTL was used above, without asking
                self.metrics.auth_checks.labels(answer="unreachable").inc()
                raise unreachable(self.upstream.url, f"checking access to {repository}: {e}") from None
        if known.status >= 300:
            raise UpstreamRefusal(known.status, known.body, known.headers)

    async def _ask(self, fp: str, authorization: str | None, repository: str) -> StoredAnswer:
        key = (fp, repository)
        task = self._flights.get(key)
        if task is None:
            task = asyncio.ensure_future(self._ask_upstream(fp, authorization, repository))
            self._flights[key] = task
            task.add_done_callback(lambda _t: self._flights.pop(key, None))
        return await asyncio.shield(task)

    async def _prune(self, now: float) -> None:
        """Forget answers past their TTL (at most once per TTL): one row per credential and repository ever seen."""
        if now - self._pruned >= max(self.ttl, 1.0):
            self._pruned = now
            await self.index.prune_answers(now - self.ttl)

    async def _ask_upstream(self, fp: str, authorization: str | None, repository: str) -> StoredAnswer:
        answer = await self.upstream.get(f"/v2/{repository}/tags/list", authorization, params={"n": "1"})
        self.metrics.auth_checks.labels(answer="allow" if answer.ok else "deny").inc()
        stored = StoredAnswer(
            200 if answer.ok else answer.status,
            b"" if answer.ok else answer.body,
            {} if answer.ok else answer.relayed_headers(),
            time.time(),
        )
        await self.index.set_answer(fp, repository, stored)
        return stored
