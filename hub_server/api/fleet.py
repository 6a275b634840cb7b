"""The fleet routes (docs/placement.md):

- ``POST /api/v1/nodes/{host}/reports``: a host's inventory report (a ``node`` token named like the host;
  ≤ ``FORKD_HUB_REPORT_BYTES``, read only once the caller may report as that host);
- ``POST /api/v1/placement``: hosts ranked by what they miss of a chain;
- ``POST /api/v1/repositories/{ns}/{repo}/peers``: which fleet peers hold the layers a pull needs (``pull`` on the
  repository; registry/fleet/peers.py);
- ``POST /api/v1/placement/kubernetes/filter`` and ``…/prioritize``: the same, as a Kubernetes scheduler
  extender (``urlPrefix`` ``…/api/v1/placement/kubernetes``).
"""

from __future__ import annotations

import json
from typing import Any

from litestar import Controller, Request, post
from litestar.di import NamedDependency
from litestar.params import FromPath, RawBody

from hub_server.api.deps import PULL, decode_json_body, json_body, read_limited
from hub_server.api.fleet_schemas import (
    InventoryAcceptedOut,
    InventoryReportIn,
    PeersIn,
    PeersOut,
    PlacementIn,
    PlacementOut,
)
from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.core.access import RepositoryScope
from hub_server.registry.fleet.inventory import may_report
from hub_server.registry.fleet.reports import check_host_name
from hub_server.registry.service import Registry
from manifest.jsontext import loads as loads_json

__all__ = ["FleetController"]

#: An ExtenderArgs with full Node objects is a few KiB per node.
MAX_EXTENDER_BYTES = 64 << 20


class FleetController(Controller):
    path = "/api/v1"
    tags = ["fleet"]

    @post(
        "/nodes/{host:str}/reports",
        summary="A fleet host's inventory report (node token named like the host)",
        status_code=200,
        request_max_body_size=None,
        operation_class=json_body(InventoryReportIn, "the host's layers (full or delta), partial layers and facts"),
    )  # bounded by read_limited (413 TOO_LARGE)
    async def report(
        self,
        host: FromPath[str],
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        request: Request[Any, Any, Any],
    ) -> InventoryAcceptedOut:
        may_report(principal, check_host_name(host))  # before the body is read
        raw = await read_limited(request, registry.ctx.limits.report_bytes, "inventory report")
        body = decode_json_body(raw, InventoryReportIn, "inventory report")
        return InventoryAcceptedOut.from_accepted(await registry.inventory.report(principal, host, body.to_report()))

    @post(
        "/placement",
        summary="Hosts ranked by the bytes of a chain they miss",
        status_code=200,
        operation_class=json_body(PlacementIn, "the reference, candidate hosts or a label selector, constraints"),
    )
    async def place(
        self, principal: NamedDependency[Principal], registry: NamedDependency[Registry], body: RawBody
    ) -> PlacementOut:
        wanted = decode_json_body(body, PlacementIn, "placement request")
        return PlacementOut.from_placement(await registry.placement.place(principal, wanted.to_request()))

    @post(
        "/repositories/{ns:str}/{repo:str}/peers",
        summary="Fleet peers holding each layer whole (for a pull with peers; pull on the repository)",
        status_code=200,
        dependencies=PULL,
        operation_class=json_body(
            PeersIn,
            "the layers (manifest digests, at most 64), the asking host, and whether it pulls them now: "
            '{"layers": [...], "host": "h1", "pulling": true}',
        ),
    )
    async def peers(
        self, repository: NamedDependency[RepositoryScope], registry: NamedDependency[Registry], body: RawBody
    ) -> PeersOut:
        wanted = decode_json_body(body, PeersIn, "peers request")
        return PeersOut.from_answer(
            await registry.peers.ask(
                repository, wanted.layers, wanted.host, pulling=wanted.pulling, window=wanted.window
            )
        )

    @post(
        "/placement/kubernetes/filter",
        summary="Kubernetes scheduler extender: filter (ExtenderArgs → ExtenderFilterResult)",
        status_code=200,
        request_max_body_size=None,
    )  # bounded by read_limited
    async def kube_filter(
        self,
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        request: Request[Any, Any, Any],
    ) -> dict[str, Any]:
        return await registry.kube.filter(principal, await _extender_args(request))

    @post(
        "/placement/kubernetes/prioritize",
        summary="Kubernetes scheduler extender: prioritize (ExtenderArgs → HostPriorityList)",
        status_code=200,
        request_max_body_size=None,
    )  # bounded by read_limited
    async def kube_prioritize(
        self,
        principal: NamedDependency[Principal],
        registry: NamedDependency[Registry],
        request: Request[Any, Any, Any],
    ) -> list[dict[str, Any]]:
        return await registry.kube.prioritize(principal, await _extender_args(request))


async def _extender_args(request: Request[Any, Any, Any]) -> Any:
    raw = await read_limited(request, MAX_EXTENDER_BYTES, "ExtenderArgs")
    try:
        return loads_json(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HubError(ErrorCode.INVALID_REQUEST, f"ExtenderArgs is not valid JSON: {e}", {}) from None
