"""Which fleet peers hold the layers a pull needs (docs/placement.md, "Peers"; docs/mirrors.md, "A fleet with peers").

:meth:`PeerDirectory.peers` answers, for each layer a puller names (manifest digests, at most
:data:`MAX_LAYERS`), up to :data:`PEERS_PER_LAYER` hosts of the fleet inventory that:

- hold the layer **whole** (a partial layer is never offered: its holder cannot serve every chunk);
- reported within the hub's node TTL (``FORKD_HUB_NODE_TTL``), like placement's ``expired`` rule;
- reported a ``peerUrl`` fact (``forkd node serve --peer-listen``);
- are not the asking host (``host``, when the puller names itself).

The candidates are shuffled per answer, so many pullers of one chain spread over its holders instead
of all picking the first. Access: the route needs ``pull`` on the repository it is called on, and a layer is
answered only where the caller may read a repository linking it (:func:`readable_linking`, the dedup rule);
any other layer is answered with no peers, exactly like a layer nobody holds, so nothing leaks.

**The swarm** (a pull asking with ``pulling: true`` and its ``host``): the asker is recorded as pulling the readable
layers it names (:class:`~.swarm.SwarmTracker`, in this process's memory), the ask is held until the layers' cohort
windows close (at most ``window`` seconds, when the asker names a shorter one; a layer a fresh peer holds whole
does not wait: the puller takes it from its holders), and each layer is answered with its
swarm too: the hosts pulling it now that have a fresh report and a ``peerUrl`` (the asker included, so every member
sees the same list), sorted by host name, at most :data:`~.swarm.SWARM_PER_LAYER`.

The hub only points: a peer is untrusted, and the client verifies every chunk it sends by its digest.

Errors: ``HubError(INVALID_REQUEST)`` naming the field (``layers``, ``layers[i]``, ``host``, ``window``);
SQLAlchemy's on a database failure (the API maps them to 503).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import timedelta

from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope, readable_linking
from hub_server.registry.core.context import RegistryContext
from hub_server.registry.fleet.fleetindex import FleetIndex
from hub_server.registry.fleet.reports import check_host_name
from hub_server.registry.fleet.swarm import SWARM_PER_LAYER, SwarmTracker

__all__ = ["MAX_LAYERS", "MAX_WINDOW_S", "PEERS_PER_LAYER", "Peer", "PeerAnswer", "PeerDirectory"]

#: Layers one question may name (a chain is at most 32 links deep).
MAX_LAYERS = 64
#: Peers answered per layer at most.
PEERS_PER_LAYER = 8
#: The longest cohort window an asker may name (the hub's own is ``FORKD_HUB_SWARM_WINDOW``).
MAX_WINDOW_S = 10.0
_LAYER = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Peer:
    host: str
    url: str


@dataclass(frozen=True)
class PeerAnswer:
    """Per layer named: the peers holding it whole, and (a pulling ask) its swarm, sorted by host."""

    holders: dict[str, list[Peer]]
    swarm: dict[str, list[Peer]]


def _invalid(field_name: str, message: str) -> HubError:
    return HubError(ErrorCode.INVALID_REQUEST, f"peers request: {field_name}: {message}", {"field": field_name})


def check_peer_question(
    layers: list[str], host: str | None, pulling: bool = False, window: float | None = None
) -> None:
    """The question's form (module docstring). Raises HubError(INVALID_REQUEST) naming the field."""
    if not layers:
        raise _invalid("layers", "name at least one layer (manifest digests)")
    if len(layers) > MAX_LAYERS:
        raise _invalid("layers", f"{len(layers)} layers, over the {MAX_LAYERS}-layer limit")
    for i, layer in enumerate(layers):
        if not isinstance(layer, str) or not _LAYER.fullmatch(layer):
            raise _invalid(f"layers[{i}]", "a layer is named by its manifest digest, sha256:<64 hex>")
    if host is not None:
        try:
            check_host_name(host)
        except HubError as e:
            raise _invalid("host", e.message) from None
    elif pulling:
        raise _invalid("host", "a pulling ask names its host (the name its node agent reports)")
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int | float) or not 0 <= window <= MAX_WINDOW_S
    ):
        raise _invalid("window", f"seconds, from 0 to {MAX_WINDOW_S:g}")


class PeerDirectory:
    """Answers which peers hold which layers (module docstring); ``index`` is the process's fleet index."""

    def __init__(
        self,
        ctx: RegistryContext,
        index: FleetIndex,
        *,
        rng: random.Random | None = None,
        tracker: SwarmTracker | None = None,
    ) -> None:
        self.ctx = ctx
        self.index = index
        self._rng = rng or random.Random()
        self.tracker = tracker or SwarmTracker(ctx.swarm_window)

    async def peers(self, scope: RepositoryScope, layers: list[str], host: str | None) -> dict[str, list[Peer]]:
        """layer → up to PEERS_PER_LAYER peers, for every layer named (module docstring). Raises HubError."""
        return (await self.ask(scope, layers, host)).holders

    async def ask(
        self,
        scope: RepositoryScope,
        layers: list[str],
        host: str | None,
        *,
        pulling: bool = False,
        window: float | None = None,
    ) -> PeerAnswer:
        """The holders of every layer named and, for a ``pulling`` ask, its swarm (module docstring). Raises
        HubError."""
        check_peer_question(layers, host, pulling, window)
        wanted = list(dict.fromkeys(layers))
        async with self.ctx.sessions() as session:
            readable = await readable_linking(session, scope.principal, manifests=wanted)
        mine = [layer for layer in wanted if layer in readable] if pulling and host is not None else []
        if mine and host is not None:
            self.tracker.join(host, mine)
        await self.index.refresh()
        cutoff = self.ctx.clock() - timedelta(seconds=self.ctx.node_ttl)
        hosts = self.index.hosts
        out: dict[str, list[Peer]] = {}
        for layer in wanted:
            found: list[Peer] = []
            if layer in readable:
                for name in self.index.holders.get(layer, ()):
                    held = hosts.get(name)
                    if name == host or held is None or held.reported_at < cutoff or not held.facts.peer_url:
                        continue
                    found.append(Peer(name, held.facts.peer_url))
            self._rng.shuffle(found)
            out[layer] = found[:PEERS_PER_LAYER]
        swarm: dict[str, list[Peer]] = {}
        if pulling:
            # only a layer no fresh peer holds waits for its cohort (a held one is taken from its holders)
            await self.tracker.wait_for_cohort([layer for layer in mine if not out[layer]], window)
            hosts, cutoff = self.index.hosts, self.ctx.clock() - timedelta(seconds=self.ctx.node_ttl)
            for layer in wanted:
                members: list[Peer] = []
                for name in self.tracker.members(layer) if layer in readable else ():
                    held = hosts.get(name)
                    if held is not None and held.reported_at >= cutoff and held.facts.peer_url:
                        members.append(Peer(name, held.facts.peer_url))
                swarm[layer] = members[:SWARM_PER_LAYER]
        return PeerAnswer(out, swarm)
