"""Delivering queued webhook events: claim due deliveries, POST them, record every attempt.

The state lives in the database (``webhook_deliveries``), so a restarted hub or another
replica resumes what is pending. ``serve`` runs :meth:`Deliverer.running`: a loop that every
``FORKD_HUB_WEBHOOK_POLL`` seconds (and right after a push queued something) claims due
deliveries — a conditional update moves ``lease_until`` forward, so two replicas never send
the same attempt — and sends them concurrently. Each attempt:

1. checks the URL against the SSRF guard (:mod:`hub_server.webhooks.guard`): a refused
   destination is never contacted, the delivery ends ``refused`` with the reason logged;
2. POSTs the stored body to the checked address (``Host`` and TLS SNI keep the URL's name),
   with the signature, event and delivery headers, ``FORKD_HUB_WEBHOOK_TIMEOUT`` for the whole
   attempt, no redirects followed and no proxy from the environment;
3. records the attempt (status code, error, duration). A 2xx ends it ``delivered``; anything
   else is retried after ``backoff × 2^(attempt-1)`` until ``FORKD_HUB_WEBHOOK_ATTEMPTS``
   attempts were made, then it ends ``failed``.

HTTPS destinations are verified against the system's CA certificates (certifi's bundle) plus
``FORKD_HUB_WEBHOOK_CA`` (a PEM file: a private CA, or a receiver's self-signed certificate). The
loop also prunes the delivery log (:mod:`hub_server.webhooks.logprune`) every few minutes.

Nothing here raises into a request: a failing loop iteration is logged and retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import certifi
from sqlalchemy import or_, update
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from hub_server.auth.models import utcnow
from hub_server.db.outage import DatabaseUnavailable
from hub_server.outages import DATABASE, Outages
from hub_server.webhooks.guard import AllowList, Destination, DestinationRefused, check_url
from hub_server.webhooks.logprune import PRUNE_EVERY, prune_deliveries
from hub_server.webhooks.models import DeliveryState, Webhook, WebhookAttempt, WebhookDelivery
from hub_server.webhooks.payload import SIGNATURE_HEADER, signature

if TYPE_CHECKING:
    import httpx

__all__ = ["Deliverer", "DeliveryPolicy"]

log = logging.getLogger(__name__)
USER_AGENT = "forkd-hub-webhook/1"
MAX_ERROR = 500


@dataclass(frozen=True)
class DeliveryPolicy:
    """Where and how hard to deliver (from the ``FORKD_HUB_WEBHOOK_*`` settings)."""

    allow: AllowList
    attempts: int = 6
    backoff: float = 5.0
    timeout: float = 5.0
    poll: float = 2.0
    batch: int = 20
    ca_file: Path | None = None
    """Extra CA certificates (PEM) trusted for HTTPS deliveries."""
    log_keep: int = 1000
    """Finished deliveries kept per webhook when the loop prunes the log."""
    log_max_age: float = 30 * 86400.0
    """Seconds a finished delivery stays in the log at most."""
    prune_every: float = PRUNE_EVERY.total_seconds()
    """Seconds between two prunings of the log by the loop."""

    def tls_context(self) -> ssl.SSLContext:
        """The context HTTPS deliveries verify with. Raises ``OSError``/``ssl.SSLError`` for an unreadable CA file.

        Made once per process for each set of CA files as they are on disk (loading certifi's bundle costs
        ~30 ms of CPU; a process that starts many hubs, the test suite, would pay it for each); a CA file
        that changed is read again.
        """
        try:
            key = (certifi.where(), None if self.ca_file is None else _file_identity(self.ca_file))
        except OSError:
            key = None  # loading it raises below, as it always did
        context = _TLS_CONTEXTS.get(key) if key is not None else None
        if context is None:
            context = ssl.create_default_context(cafile=certifi.where())
            if self.ca_file is not None:
                context.load_verify_locations(cafile=str(self.ca_file))
            if key is not None:
                _TLS_CONTEXTS[key] = context
        return context

    @property
    def lease(self) -> timedelta:
        """How long a claim holds: past it, another replica may take the delivery over."""
        return timedelta(seconds=self.timeout * 2 + 10)

    def retry_delay(self, attempt: int) -> timedelta:
        return timedelta(seconds=self.backoff * 2 ** (attempt - 1))


#: The contexts :meth:`DeliveryPolicy.tls_context` made, by CA files (never changed once made: httpx only sets
#: the same ALPN protocols on them again).
_TLS_CONTEXTS: dict[tuple[str, tuple[str, int, int, int] | None], ssl.SSLContext] = {}


def _file_identity(path: Path) -> tuple[str, int, int, int]:
    """``path`` as it is on disk now (its inode, size, modification time); raises ``OSError`` if it is missing."""
    st = path.stat()
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class _Outcome:
    status_code: int | None
    error: str | None
    refused: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class Deliverer:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        policy: DeliveryPolicy,
        outages: Outages | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._sessions = sessions
        self.policy = policy
        self._outages = outages or Outages()
        self._clock = clock
        self._wake: asyncio.Event | None = None
        self._tls = policy.tls_context()
        self._pruned_at: datetime | None = None

    def wake(self) -> None:
        """Look for due deliveries now rather than at the next poll (no-op when not running)."""
        if self._wake is not None:
            self._wake.set()

    async def run_due(self) -> int:
        """Claim the due deliveries (at most ``policy.batch``), attempt each once; return how many."""
        claimed = await self._claim()
        if claimed:
            # httpx (with its CLI's click, rich, pygments: ~0.1 s) is imported on the first delivery, in a worker
            # thread: not by every ``forkd-hub serve`` start (bench/hub_startup.py), and never on the event loop
            httpx = await asyncio.to_thread(importlib.import_module, "httpx")
            async with httpx.AsyncClient(follow_redirects=False, trust_env=False, verify=self._tls) as client:
                await asyncio.gather(*(self._attempt(client, d, h) for d, h in claimed))
        return len(claimed)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the delivery loop while the block runs (the app's lifespan).

        Leaving the block lets attempts in flight finish (each is bounded by the timeout) and
        records them; only then is the loop cancelled.
        """
        wake, stop = asyncio.Event(), asyncio.Event()
        self._wake = wake
        task = asyncio.create_task(self._loop(wake, stop), name="forkd-hub-webhooks")
        try:
            yield
        finally:
            self._wake = None
            stop.set()
            wake.set()
            try:
                await asyncio.wait_for(asyncio.shield(task), self.policy.timeout + 2)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _loop(self, wake: asyncio.Event, stop: asyncio.Event) -> None:
        while not stop.is_set():
            wake.clear()
            try:
                while await self.run_due() == self.policy.batch and not stop.is_set():
                    pass  # a full batch: more may be due
                await self._prune_now_and_then()
                self._outages.recovered(DATABASE)
            except DatabaseUnavailable as e:  # one line when it goes down (hub_server/outages.py), not one per poll
                self._outages.failed(DATABASE, e.reason)
            except Exception:  # noqa: BLE001 - logged; the next poll tries again
                log.exception("webhook delivery loop failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.policy.poll)

    async def prune_log(self) -> int:
        """Prune the delivery log to the policy's limits now; return how many deliveries went."""
        return await prune_deliveries(
            self._sessions,
            keep=self.policy.log_keep,
            max_age=timedelta(seconds=self.policy.log_max_age),
            now=self._clock(),
        )

    async def _prune_now_and_then(self) -> None:
        now = self._clock()
        if self._pruned_at is None or now - self._pruned_at >= timedelta(seconds=self.policy.prune_every):
            self._pruned_at = now
            pruned = await self.prune_log()
            if pruned:
                log.info("pruned %d finished webhook deliveries from the log", pruned)

    async def _claim(self) -> list[tuple[WebhookDelivery, Webhook]]:
        now = self._clock()
        free = or_(col(WebhookDelivery.lease_until).is_(None), col(WebhookDelivery.lease_until) < now)
        async with self._sessions() as session:
            due = (
                await session.exec(
                    select(WebhookDelivery, Webhook)
                    .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                    .where(
                        WebhookDelivery.state == DeliveryState.PENDING,
                        col(WebhookDelivery.next_attempt_at) <= now,
                        free,
                    )
                    .order_by(col(WebhookDelivery.next_attempt_at))
                    .limit(self.policy.batch)
                )
            ).all()
            claimed = []
            for delivery, hook in due:
                result = await session.exec(
                    update(WebhookDelivery)
                    .where(col(WebhookDelivery.id) == delivery.id, WebhookDelivery.state == DeliveryState.PENDING, free)
                    .values(lease_until=now + self.policy.lease)
                )
                if result.rowcount == 1:
                    claimed.append((delivery, hook))
            await session.commit()
        return claimed

    async def _attempt(self, client: httpx.AsyncClient, delivery: WebhookDelivery, hook: Webhook) -> None:
        started = time.monotonic()
        try:
            outcome = await self._send(client, delivery, hook)
        except Exception as e:  # noqa: BLE001 - recorded as this attempt's error, never raised
            outcome = _Outcome(None, f"{type(e).__name__}: {e}")
        duration_ms = round((time.monotonic() - started) * 1000)
        try:
            await self._record(delivery, outcome, duration_ms)
        except DatabaseUnavailable as e:  # the claim's lease expires; the delivery is attempted again
            self._outages.failed(DATABASE, e.reason)
        except Exception:  # noqa: BLE001 - e.g. the webhook was removed meanwhile; its lease expires
            log.exception("recording webhook delivery %s failed", delivery.id)

    async def _send(self, client: httpx.AsyncClient, delivery: WebhookDelivery, hook: Webhook) -> _Outcome:
        import httpx  # loaded by run_due already

        try:
            destination = await check_url(hook.url, self.policy.allow)
        except DestinationRefused as e:
            return _Outcome(None, str(e), refused=True)
        except OSError as e:
            return _Outcome(None, f"cannot resolve the webhook host: {e}")
        body = delivery.payload.encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Host": _host_header(destination),
            "X-Forkd-Event": delivery.event,
            "X-Forkd-Delivery": delivery.id,
            SIGNATURE_HEADER: signature(hook.secret, body),
        }
        url = httpx.URL(hook.url).copy_with(host=destination.address)
        extensions = {"sni_hostname": destination.host} if destination.scheme == "https" else {}
        try:
            async with asyncio.timeout(self.policy.timeout):
                response = await client.post(
                    url, content=body, headers=headers, extensions=extensions, timeout=self.policy.timeout
                )
        except TimeoutError:
            return _Outcome(None, f"no response within {self.policy.timeout:g}s")
        except httpx.HTTPError as e:
            return _Outcome(None, f"{type(e).__name__}: {e}"[:MAX_ERROR])
        if response.is_redirect:
            return _Outcome(response.status_code, f"HTTP {response.status_code}: redirects are not followed")
        if not response.is_success:
            return _Outcome(response.status_code, f"HTTP {response.status_code}")
        return _Outcome(response.status_code, None)

    async def _record(self, delivery: WebhookDelivery, outcome: _Outcome, duration_ms: int) -> None:
        now = self._clock()
        attempt = delivery.attempts + 1
        if outcome.ok:
            state = DeliveryState.DELIVERED
        elif outcome.refused:
            state = DeliveryState.REFUSED
        elif attempt >= self.policy.attempts:
            state = DeliveryState.FAILED
        else:
            state = DeliveryState.PENDING
        async with self._sessions() as session:
            session.add(
                WebhookAttempt(
                    delivery_id=delivery.id,
                    attempt=attempt,
                    at=now,
                    status_code=outcome.status_code,
                    error=None if outcome.error is None else outcome.error[:MAX_ERROR],
                    duration_ms=duration_ms,
                )
            )
            await session.exec(
                update(WebhookDelivery)
                .where(col(WebhookDelivery.id) == delivery.id)
                .values(
                    attempts=attempt,
                    state=state,
                    lease_until=None,
                    next_attempt_at=now + self.policy.retry_delay(attempt)
                    if state == DeliveryState.PENDING
                    else delivery.next_attempt_at,
                    finished_at=None if state == DeliveryState.PENDING else now,
                )
            )
            await session.commit()
        if not outcome.ok:
            log.warning(
                "webhook delivery %s (%s %s) attempt %d: %s; now %s",
                delivery.id,
                delivery.event,
                delivery.repository,
                attempt,
                outcome.error,
                state,
            )


def _host_header(destination: Destination) -> str:
    host = f"[{destination.host}]" if ":" in destination.host else destination.host
    default = 443 if destination.scheme == "https" else 80
    return host if destination.port == default else f"{host}:{destination.port}"
