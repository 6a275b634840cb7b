"""Sending this host's inventory to a hub, incrementally (docs/placement.md, "Inventory").

The first report to a hub (or after the hub refused a delta) is **full**: every layer held whole. The
next ones are **deltas** against what the hub acknowledged (``add``, ``remove``, and ``base``, the
generation it answered): a heartbeat of a host whose store did not change sends an empty delta. Partial
layers and facts always go whole. What the hub acknowledged is kept in ``<store>/node/state.json``,
with the store's change counter the report reflects (``forkd node serve`` reports again when it moves).

Refusals the agent handles itself: 409 ``INVENTORY_STALE`` (the hub lost track, or another agent reported
as this host) → a full report; 403 ``DENIED`` listing layers (unknown to the hub, or in repositories the
token may not report) → those are left out, remembered for an hour, and the report is sent again.
Anything else is raised.

``download_rate``: the caller's, else the last rate ``forkd pull`` measured here (``state.py``). ``peer_url``:
where this host's agent serves chunks to fleet peers (the ``peerUrl`` fact; ``forkd node serve --peer-listen``).

Errors: forkd_client.hub.errors (HubError and its subclasses: Unauthorized, Forbidden, HubUnreachable …),
OSError.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..hub.client import HubClient
from ..hub.credentials import normalize_url
from ..hub.errors import HubError
from ..store import SnapshotStore
from .facts import host_facts, vmm_facts
from .inventory import Inventory, scan_inventory
from .state import measured_rate, read_state, write_state

__all__ = ["ReportOutcome", "Reporter"]

#: A layer the hub refused is offered again after this long (the token's scope may have grown).
REFUSED_TTL_S = 3600.0
#: Refusals listing layers handled in one report at most (each drops up to 100 layers).
MAX_RETRIES = 20


@dataclass
class ReportOutcome:
    """What one report did: sent ``mode`` to ``hub`` as ``host``; the hub's ``generation``; what it holds now."""

    hub: str
    host: str
    mode: str
    generation: int
    layers: int
    partial: int
    changes: int
    refused: list[str] = field(default_factory=list)

    def to_obj(self) -> dict[str, Any]:
        return {
            "hub": self.hub,
            "host": self.host,
            "mode": self.mode,
            "generation": self.generation,
            "layers": self.layers,
            "partial": self.partial,
            "changes": self.changes,
            "refused": list(self.refused),
        }


class Reporter:
    """Reports ``store``'s inventory to the hub of ``client`` as ``host`` (module docstring). ``vmms``: the VMM
    facts (default: looked up once, here)."""

    def __init__(
        self,
        store: SnapshotStore,
        client: HubClient,
        host: str,
        *,
        labels: Mapping[str, str] | None = None,
        download_rate: int | None = None,
        vmms: list[dict[str, str]] | None = None,
        peer_url: str | None = None,
        clock: Any = time.time,
    ) -> None:
        self.store, self.client, self.host = store, client, host
        self.hub = normalize_url(client.base_url)
        self.labels = dict(labels or {})
        self.download_rate = download_rate
        self.peer_url = peer_url
        self.vmms = vmm_facts() if vmms is None else vmms
        self._clock = clock

    def report(self, *, full: bool = False) -> ReportOutcome:
        """Send one report (a delta when the hub's acknowledgement is known, unless ``full``). Raises HubError.

        The store is opened for this report alone (its local databases belong to the thread that runs it:
        ``forkd node serve`` reports on a worker thread)."""
        with SnapshotStore(self.store.root) as store:
            return self._report(store, full)

    def _report(self, store: SnapshotStore, full: bool) -> ReportOutcome:
        changes = store.changes()  # read first: a change during the scan makes the agent report again
        inventory = scan_inventory(store, self.hub)
        state = read_state(store)
        now = self._clock()
        refused = {
            d: t
            for d, t in (state.get("refused") or {}).items()
            if isinstance(t, (int, float)) and now - t < REFUSED_TTL_S and state.get("hub") == self.hub
        }
        same = state.get("hub") == self.hub and state.get("host") == self.host
        acked = set(state.get("layers") or []) if same else set()
        delta = same and not full and isinstance(state.get("generation"), int)
        for _ in range(MAX_RETRIES):
            layers = {d for d in inventory.layers if d not in refused}
            body = self._body(store, inventory, layers, refused, acked if delta else None, state.get("generation"))
            try:
                answer = self.client.report_inventory(self.host, body)
            except HubError as e:
                listed = e.detail.get("layers") if isinstance(e.detail, dict) else None
                if e.code == "INVENTORY_STALE" and delta:
                    delta = False
                    continue
                if e.code == "DENIED" and isinstance(listed, list) and listed:
                    refused.update({str(d): now for d in listed})
                    continue
                raise
            outcome = ReportOutcome(
                self.hub,
                self.host,
                "delta" if delta else "full",
                int(answer.get("generation", 0)),
                int(answer.get("layers", len(layers))),
                int(answer.get("partial", 0)),
                changes,
                sorted(refused),
            )
            self._save(store, outcome, layers, refused)
            return outcome
        raise HubError(f"{self.hub} kept refusing layers of host {self.host}'s inventory; giving up this report")

    def _body(
        self,
        store: SnapshotStore,
        inventory: Inventory,
        layers: set[str],
        refused: Mapping[str, float],
        acked: set[str] | None,
        generation: object,
    ) -> dict[str, Any]:
        rate = self.download_rate if self.download_rate is not None else measured_rate(store)
        body: dict[str, Any] = {
            "partial": [p.to_wire() for p in inventory.partial if p.layer not in refused],
            "facts": host_facts(
                store.root, vmms=self.vmms, labels=self.labels, download_rate=rate, peer_url=self.peer_url
            ),
        }
        if acked is None:
            body.update(mode="full", layers=sorted(layers))
        else:
            body.update(mode="delta", base=generation, add=sorted(layers - acked), remove=sorted(acked - layers))
        return body

    def _save(
        self, store: SnapshotStore, outcome: ReportOutcome, layers: set[str], refused: Mapping[str, float]
    ) -> None:
        state = {
            "hub": self.hub,
            "host": self.host,
            "generation": outcome.generation,
            "layers": sorted(layers),
            "refused": dict(refused),
            "changes": outcome.changes,
            "reported_at": self._clock(),
            "mode": outcome.mode,
            "peer_url": self.peer_url,
        }
        write_state(store, state)
