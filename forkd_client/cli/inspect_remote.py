"""``forkd inspect REF``: what a hub holds for a reference: its size (logical, stored by the layer, shared
with its parent), its chain and what it runs on (a forkd hub's lineage and the layer's config), the manifest's
annotations, the snapshot's own annotations (its config), and the referrers attached to it (provenance,
signatures), with each provenance statement read back and verified against its digest.

``forkd inspect`` calls :func:`run_inspect_remote` when its argument is a hub reference (it has
a ``/``, which no local tag has), or with ``--remote`` for a local tag pulled from a hub (its
origin names the hub and the layer). Errors: the HubError family, UsageError (``--verify``/``--deep``,
which check local files; ``--remote`` on a tag that was not pulled).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from manifest import mediatypes as mt

from ..errors import UsageError
from ..hub.client import HubClient
from ..hub.errors import HubError
from ..hub.provenance import ARTIFACT_TYPE, PREDICATE_TYPE
from ..hub.reference import Reference
from ..hub.referrers import fetch_documents
from .hub import _client
from .output import Context, human_size

__all__ = ["remote_inspection", "run_inspect_remote"]

#: the largest config read back for its annotations (a forkd config is a few KiB)
MAX_CONFIG_BYTES = 4 << 20


def run_inspect_remote(args: argparse.Namespace, ctx: Context) -> int:
    if args.verify or args.deep:
        raise UsageError(
            f"{args.tag}: --verify and --deep check a local snapshot's files; pull it first, then inspect its local tag"
        )
    if "/" in args.tag:
        ref, hub = Reference.parse(args.tag), None
    else:
        ref, hub = _origin(args, ctx)
    with _client(ref, hub, ctx=None if args.json else ctx, mirrored=True) as client:  # reads only: mirrors serve them
        info = remote_inspection(client, ref)
    if args.json:
        ctx.json(info)
        return 0
    ctx.print(f"Reference:      {info['reference']}")
    ctx.print(f"Hub:            {info['hub']}")
    ctx.print(f"Digest:         {info['digest']}")
    ctx.print(f"Artifact type:  {info['artifact_type'] or '-'}")
    size = info["size"]
    if size:
        shared = size.get("sharedWithParent")
        ctx.print(
            f"Size:           {human_size(size.get('logicalSize') or 0)} logical, "
            f"{human_size(size.get('storedSize') or 0)} stored by this layer"
            + (f", {human_size(shared)} shared with its parent" if info["chain"] and shared is not None else "")
        )
    if size or info["chain"]:
        names = [
            f"{a['repository']}:{a['tags'][0]}" if a["tags"] else f"{a['repository']}@{str(a['digest'])[:19]}…"
            for a in info["chain"]
        ]
        ctx.print(f"Chain:          depth {len(names) + 1}: " + " → ".join([*names, str(ref)]))
    runs_on = info["runs_on"]
    ctx.print("Runs on:        " + (", ".join(f"{k} {v}" for k, v in sorted(runs_on.items())) if runs_on else "-"))
    for title, key in (("Annotations", "annotations"), ("Snapshot annotations", "snapshot_annotations")):
        ctx.print(f"{title}:" + ("" if info[key] else " -"))
        for k, v in sorted(info[key].items()):
            ctx.print(f"  {k}: {v}")
    ctx.print("Referrers:" + ("" if info["referrers"] else " - (no provenance or signature attached)"))
    for r in info["referrers"]:
        ctx.print(f"  {r['digest']} {r.get('artifactType') or '-'}")
        for k, v in sorted((r.get("annotations") or {}).items()):
            ctx.print(f"    {k}: {v}")
    for p in info["provenance"]:
        predicate = (p["statement"] or {}).get("predicate") or {}
        run = predicate.get("runDetails") or {}
        ctx.print(
            f"Provenance {p['digest']}: builder {run.get('builder', {}).get('id', '-')}, "
            f"run {run.get('metadata', {}).get('invocationId', '-')}"
        )
    return 0


def _origin(args: argparse.Namespace, ctx: Context) -> tuple[Reference, str]:
    """The hub reference (``ns/repo@digest``) and hub URL a local tag was pulled from."""
    with ctx.store() as store:
        origin = store.get(args.tag).origin or {}
    if not origin.get("hub") or not origin.get("reference"):
        raise UsageError(
            f"--remote: snapshot {args.tag!r} was not pulled from a hub (it has no origin); "
            "inspect a hub reference instead, e.g. forkd inspect acme/python:numpy"
        )
    return Reference.parse(str(origin["reference"])), str(origin["hub"])


def remote_inspection(client: HubClient, ref: Reference) -> dict[str, Any]:
    """What ``forkd inspect REF --json`` prints (docs/cli.md). Raises the HubError family."""
    repo = client.repository(ref.name)
    data, digest = repo.get_manifest(ref.ref)
    manifest = _object(data)
    config: dict[str, Any] = manifest["config"] if isinstance(manifest.get("config"), dict) else {}
    snapshot_annotations: dict[str, str] = {}
    runs_on: dict[str, Any] = {}
    if config.get("mediaType") in (mt.CONFIG, mt.CONFIG_V1) and isinstance(config.get("digest"), str):
        size = config.get("size")
        blob = _object(repo.get_blob(config["digest"], size if isinstance(size, int) else None, limit=MAX_CONFIG_BYTES))
        snapshot_annotations = _strings(blob.get("annotations"))
        runs_on = blob["compat"] if isinstance(blob.get("compat"), dict) else {}
    sizes: dict[str, Any] = {}
    chain: list[dict[str, Any]] = []
    if runs_on or snapshot_annotations or config.get("mediaType") in (mt.CONFIG, mt.CONFIG_V1):
        try:  # a forkd hub's lineage; another registry (no such route) leaves size and chain empty
            lineage = repo.lineage(digest)
        except HubError:
            lineage = {}
        sizes = {k: lineage[k] for k in ("logicalSize", "storedSize", "sharedWithParent") if k in lineage}
        chain = [
            {"digest": a.get("digest"), "repository": a.get("repository"), "tags": a.get("tags") or []}
            for a in lineage.get("ancestors") or []
            if isinstance(a, dict)
        ]
    referrers: list[dict[str, Any]] = [
        {
            "digest": str(r.get("digest")),
            "artifactType": r.get("artifactType"),
            "annotations": _strings(r.get("annotations")),
        }
        for r in repo.referrers(digest)
    ]
    provenance = []
    for r in referrers:
        if r["artifactType"] != ARTIFACT_TYPE:
            continue
        statements = [_object(d.data) for d in fetch_documents(repo, str(r["digest"])) if d.media_type == ARTIFACT_TYPE]
        statement = next((s for s in statements if s.get("predicateType") == PREDICATE_TYPE), None)
        provenance.append({"digest": r["digest"], "annotations": r["annotations"], "statement": statement})
    return {
        "reference": str(ref),
        "hub": client.base_url,
        "digest": digest,
        "media_type": manifest.get("mediaType"),
        "artifact_type": manifest.get("artifactType"),
        "annotations": _strings(manifest.get("annotations")),
        "snapshot_annotations": snapshot_annotations,
        "size": sizes,
        "chain": chain,
        "runs_on": runs_on,
        "referrers": referrers,
        "provenance": provenance,
    }


def _object(data: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
