"""The Kubernetes scheduler extender face of placement (docs/placement.md, "Kubernetes").

kube-scheduler POSTs an ``ExtenderArgs`` (``k8s.io/kube-scheduler/extender/v1``: ``Pod``, and either
``Nodes`` (a ``NodeList``) or ``NodeNames`` when the extender is ``nodeCacheCapable``) to
``<urlPrefix>/<filterVerb>`` and ``<urlPrefix>/<prioritizeVerb>``. Those Go types carry no JSON tags, so
the keys are the field names; Go decodes them case-insensitively, and so does :func:`parse_args`.

A pod names its snapshot in the annotation :data:`ANNOTATION` (``ns/repo:tag`` or ``ns/repo@digest``).
Kubernetes node names are fleet host names.

- **filter** answers an ``ExtenderFilterResult``: the nodes placement excludes for ``compat`` or
  ``capacity`` are ``FailedAndUnresolvableNodes`` (preempting pods would not help), every other node
  passes (a node that never reported, or went silent, is not refused: it can still pull). A pod
  without the annotation passes everywhere. A reference that cannot be placed (unknown, unreadable)
  is the result's ``Error``.
- **prioritize** answers a ``HostPriorityList``: ``MaxExtenderPriority`` (10) for a node missing
  nothing, else ``floor(10 × (1 − missing / total))`` capped at 9; 0 for nodes placement does not rank.

Errors: ``HubError(INVALID_REQUEST)`` for a body that is not an ``ExtenderArgs``; what placement raises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hub_server.auth.scopes import Principal
from hub_server.errors import ErrorCode, HubError
from hub_server.registry.fleet.placement import Placement, PlacementRequest, PlacementService

__all__ = ["ANNOTATION", "MAX_PRIORITY", "ExtenderArgs", "KubeExtender", "parse_args"]

ANNOTATION = "forkd.dev/snapshot"
#: ``MaxExtenderPriority`` of ``k8s.io/kube-scheduler/extender/v1``.
MAX_PRIORITY = 10
#: Placement exclusions preempting pods cannot fix.
UNRESOLVABLE = ("compat", "capacity")
#: Nodes one call may name (kube-scheduler sends the feasible nodes of one pod).
MAX_NODES = 10_000


@dataclass(frozen=True)
class ExtenderArgs:
    """What placement needs of an ``ExtenderArgs``: the snapshot reference (None: no annotation), the
    candidate node names in order, and the ``Nodes`` items as received (None when ``NodeNames`` was sent)."""

    reference: str | None
    names: list[str]
    nodes: list[dict[str, Any]] | None


def _field(obj: dict[str, Any], name: str) -> Any:
    """``obj[name]`` matched case-insensitively, as Go's encoding/json does for untagged fields."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    return next((v for k, v in obj.items() if isinstance(k, str) and k.lower() == lowered), None)


def _bad(message: str) -> HubError:
    return HubError(ErrorCode.INVALID_REQUEST, f"ExtenderArgs: {message}", {})


def parse_args(obj: Any) -> ExtenderArgs:
    """Read an ``ExtenderArgs`` JSON object. Raises HubError(INVALID_REQUEST) naming what is wrong."""
    if not isinstance(obj, dict):
        raise _bad("the body must be a JSON object")
    pod = _field(obj, "Pod")
    if not isinstance(pod, dict):
        raise _bad("'Pod' must be a Pod object")
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    annotations = annotations if isinstance(annotations, dict) else {}
    reference = annotations.get(ANNOTATION)
    if reference is not None and not isinstance(reference, str):
        raise _bad(f"annotation {ANNOTATION} must be a string")
    node_names = _field(obj, "NodeNames")
    node_list = _field(obj, "Nodes")
    if node_names is not None:
        if not isinstance(node_names, list) or not all(isinstance(n, str) for n in node_names):
            raise _bad("'NodeNames' must be a list of strings")
        names, nodes = list(node_names), None
    elif node_list is not None:
        items = node_list.get("items") if isinstance(node_list, dict) else None
        if not isinstance(items, list) or not all(isinstance(n, dict) for n in items):
            raise _bad("'Nodes' must be a NodeList with 'items'")
        names = []
        for node in items:
            name = (node.get("metadata") or {}).get("name") if isinstance(node.get("metadata"), dict) else None
            if not isinstance(name, str):
                raise _bad("every node of 'Nodes' needs metadata.name")
            names.append(name)
        nodes = items
    else:
        raise _bad("give 'NodeNames' or 'Nodes'")
    if len(names) > MAX_NODES:
        raise HubError(ErrorCode.TOO_LARGE, f"ExtenderArgs names {len(names)} nodes, over {MAX_NODES}", {})
    return ExtenderArgs(reference.strip() if reference else None, names, nodes)


def score(missing: int, total: int) -> int:
    """A ranked node's priority (module docstring)."""
    if missing <= 0 or total <= 0:
        return MAX_PRIORITY
    return max(0, min(MAX_PRIORITY - 1, math.floor(MAX_PRIORITY * (1 - missing / total))))


class KubeExtender:
    """filter and prioritize over :class:`PlacementService` (module docstring)."""

    def __init__(self, placement: PlacementService) -> None:
        self.placement = placement

    async def _place(self, principal: Principal, args: ExtenderArgs) -> Placement:
        assert args.reference is not None
        return await self.placement.place(principal, PlacementRequest(args.reference, hosts=tuple(args.names)))

    async def filter(self, principal: Principal, obj: Any) -> dict[str, Any]:
        """An ``ExtenderFilterResult`` for ``obj`` (an ``ExtenderArgs``). Raises HubError(INVALID_REQUEST)."""
        args = parse_args(obj)
        failed: dict[str, str] = {}
        error = ""
        if args.reference is not None:
            try:
                placement = await self._place(principal, args)
            except HubError as e:
                error = f"{ANNOTATION}={args.reference}: {e.message}"
            else:
                failed = {e.host: f"forkd: {e.reason}" for e in placement.excluded if e.kind in UNRESOLVABLE}
        passing = [name for name in args.names if name not in failed]
        result: dict[str, Any] = {"FailedNodes": {}, "FailedAndUnresolvableNodes": failed, "Error": error}
        if args.nodes is None:
            result["NodeNames"] = [] if error else passing
        else:
            result["Nodes"] = {
                "items": []
                if error
                else [n for n, name in zip(args.nodes, args.names, strict=True) if name not in failed]
            }
        return result

    async def prioritize(self, principal: Principal, obj: Any) -> list[dict[str, Any]]:
        """A ``HostPriorityList`` for ``obj`` (an ``ExtenderArgs``). Raises HubError, and what placement raises."""
        args = parse_args(obj)
        scores = dict.fromkeys(args.names, 0)
        if args.reference is not None:
            placement = await self._place(principal, args)
            for host in placement.ranked:
                scores[host.host] = score(host.missing.total, placement.total)
        return [{"Host": name, "Score": value} for name, value in scores.items()]
