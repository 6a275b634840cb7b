"""A fleet host's inventory report, as the registry takes it: typed, checked, bounded (docs/placement.md).

A report says which layers the host holds **whole** (manifest digests; ``mode`` ``full``: all of them,
``delta``: ``add`` and ``remove`` against generation ``base``), which layers it holds **in part**
(:class:`PartialLayer`: a chunk bitmap per file, from an interrupted pull of that layer, ``kind``
``pull``, or a lazy session of that head, ``kind`` ``lazy``), and the host's facts
(:class:`HostFacts`). Partial layers and facts are always sent whole.

:func:`check_report` refuses what is malformed before anything is read from the database; checks that
need the hub (readable layers, bitmap sizes against the layer's files) are ``inventory.py``'s.

Errors: ``HubError(INVALID_REQUEST)`` naming the field, ``HubError(TOO_LARGE)`` for counts over a limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from hub_server.errors import ErrorCode, HubError
from manifest import mediatypes as mt
from manifest.bitmap import BitmapError, decode_bitmap

__all__ = [
    "MAX_PARTIAL",
    "FileBitmap",
    "HostFacts",
    "PartialLayer",
    "Report",
    "VmmFacts",
    "check_host_name",
    "check_report",
]

#: Partly held layers one report may list (interrupted pulls and lazy sessions are few).
MAX_PARTIAL = 64
#: VMM fact records, labels, and the length of a label's key and value (Kubernetes' own bounds).
MAX_VMMS = 8
MAX_LABELS = 64
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_LAYER = re.compile(r"sha256:[0-9a-f]{64}")
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_FACT_TEXT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+:-]{0,63}")
#: A peer URL: http(s), a host (name, IPv4, or [IPv6]) and an optional port and path; no credentials, query or fragment
#: (the node agent checks the same form before it reports one: forkd_client/hub/peerwire.py).
_PEER_URL = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?")
MAX_PEER_URL = 256
#: The largest file a layer may hold is 2**40 bytes: 2**24 chunks of 64 KiB, 2**28 of 4 KiB.
MAX_CHUNKS = 1 << 28
Kind = Literal["pull", "lazy"]


def _invalid(field_name: str, message: str) -> HubError:
    return HubError(ErrorCode.INVALID_REQUEST, f"inventory report: {field_name}: {message}", {"field": field_name})


def check_host_name(host: str) -> str:
    """``host`` if it may name a fleet host (a token name's characters). Raises HubError(INVALID_REQUEST)."""
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise HubError(
            ErrorCode.INVALID_REQUEST,
            f"invalid host name {str(host)[:80]!r}: use 1-64 characters from A-Z a-z 0-9 _ . -",
            {"field": "host"},
        )
    return host


@dataclass(frozen=True)
class VmmFacts:
    """One VMM this host can restore with, in the manifest's compat vocabulary (docs/manifest-format.md §5)."""

    vmm: str
    vmm_version: str
    machine: str
    accel: str
    arch: str
    cpu: str

    def compat(self) -> dict[str, str]:
        return {
            "vmm": self.vmm,
            "vmmVersion": self.vmm_version,
            "machine": self.machine,
            "accel": self.accel,
            "arch": self.arch,
            "cpu": self.cpu,
        }


@dataclass(frozen=True)
class HostFacts:
    """What a host says about itself; ``None`` where it did not say."""

    free_disk: int | None = None
    free_memory: int | None = None
    arch: str | None = None
    cpus: int | None = None
    load: float | None = None
    vmms: tuple[VmmFacts, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    download_rate: int | None = None
    """Bytes per second the host measured pulling from this hub."""
    peer_url: str | None = None
    """Where the host's agent serves its verified chunks to fleet peers (``forkd node serve --peer-listen``)."""

    def to_json(self) -> dict[str, Any]:
        """The form stored in ``fleet_hosts.facts`` (and shown on the wire)."""
        return {
            "freeDisk": self.free_disk,
            "freeMemory": self.free_memory,
            "arch": self.arch,
            "cpus": self.cpus,
            "load": self.load,
            "vmms": [v.compat() for v in self.vmms],
            "labels": dict(self.labels),
            "downloadRate": self.download_rate,
            "peerUrl": self.peer_url,
        }

    @classmethod
    def from_json(cls, obj: Any) -> HostFacts:
        """Back from :meth:`to_json` (stored, so already checked; unknown shapes read as "not said")."""
        obj = obj if isinstance(obj, dict) else {}

        def number(key: str, kind: type) -> Any:
            value = obj.get(key)
            return value if isinstance(value, kind) and not isinstance(value, bool) else None

        vmms = tuple(
            VmmFacts(
                str(v.get("vmm", "")),
                str(v.get("vmmVersion", "")),
                str(v.get("machine", "")),
                str(v.get("accel", "")),
                str(v.get("arch", "")),
                str(v.get("cpu", "")),
            )
            for v in obj.get("vmms") or []
            if isinstance(v, dict)
        )
        labels = obj.get("labels") if isinstance(obj.get("labels"), dict) else {}
        load = obj.get("load")
        return cls(
            free_disk=number("freeDisk", int),
            free_memory=number("freeMemory", int),
            arch=obj.get("arch") if isinstance(obj.get("arch"), str) else None,
            cpus=number("cpus", int),
            load=float(load) if isinstance(load, (int, float)) and not isinstance(load, bool) else None,
            vmms=vmms,
            labels={str(k): str(v) for k, v in labels.items()},
            download_rate=number("downloadRate", int),
            peer_url=obj.get("peerUrl") if isinstance(obj.get("peerUrl"), str) else None,
        )


@dataclass(frozen=True)
class FileBitmap:
    """Which chunks of one file of a partly held layer the host holds: ``present`` is the wire form."""

    chunks: int
    present: str

    def bits(self) -> bytes:
        """The raw bitmap (checked when the report was accepted). Raises BitmapError if it was not."""
        return decode_bitmap(self.present, self.chunks)


@dataclass(frozen=True)
class PartialLayer:
    """A layer the host holds part of: an interrupted pull of it (``pull``: bitmaps over its chunk maps'
    entries, a bit set where the staged file holds the entry's chunk) or a lazy session of it as a head
    (``lazy``: bitmaps over the head's assembled ``memory.bin``, a bit set where the chunk is there)."""

    layer: str
    kind: Kind
    files: dict[str, FileBitmap]

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "kind": self.kind,
            "files": {role: {"chunks": f.chunks, "present": f.present} for role, f in self.files.items()},
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PartialLayer:
        """Back from :meth:`to_json` (as stored)."""
        files = {role: FileBitmap(int(f["chunks"]), str(f["present"])) for role, f in obj["files"].items()}
        return cls(str(obj["layer"]), obj["kind"], files)


@dataclass(frozen=True)
class Report:
    """One inventory report (module docstring)."""

    mode: Literal["full", "delta"]
    facts: HostFacts
    layers: tuple[str, ...] = ()
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    base: int | None = None
    partial: tuple[PartialLayer, ...] = ()

    @property
    def named_layers(self) -> list[str]:
        """Every layer the report says the host holds now, whole or in part (what must be readable)."""
        return list(dict.fromkeys([*self.layers, *self.add, *(p.layer for p in self.partial)]))


def check_report(report: Report, max_layers: int) -> Report:
    """``report`` if it is well formed and within the limits (the module docstring); each bitmap is decoded
    once here, so a bomb or a wrong size is refused before anything is stored.

    Raises: HubError(INVALID_REQUEST) naming the field; HubError(TOO_LARGE) for more than ``max_layers``
    layers or :data:`MAX_PARTIAL` partial layers.
    """
    if report.mode == "full":
        if report.add or report.remove or report.base is not None:
            raise _invalid("mode", "a full report lists 'layers' only (no 'add', 'remove' or 'base')")
    elif report.mode == "delta":
        if report.layers:
            raise _invalid("layers", "a delta report lists 'add' and 'remove', not 'layers'")
        if report.base is None or report.base < 0:
            raise _invalid("base", "a delta report names the generation it builds on ('base', from the last answer)")
    else:  # pragma: no cover - the wire type allows only these two
        raise _invalid("mode", "must be 'full' or 'delta'")
    for name, digests in (("layers", report.layers), ("add", report.add), ("remove", report.remove)):
        if len(digests) > max_layers:
            raise HubError(
                ErrorCode.TOO_LARGE,
                f"inventory report: {name} lists {len(digests)} layers, over the {max_layers}-layer limit",
                {"field": name, "limit": max_layers},
            )
        for i, digest in enumerate(digests):
            if not isinstance(digest, str) or not _LAYER.fullmatch(digest):
                raise _invalid(f"{name}[{i}]", "a layer is named by its manifest digest, sha256:<64 hex>")
    if len(report.partial) > MAX_PARTIAL:
        raise HubError(
            ErrorCode.TOO_LARGE,
            f"inventory report: {len(report.partial)} partial layers, over the {MAX_PARTIAL}-layer limit",
            {"field": "partial", "limit": MAX_PARTIAL},
        )
    seen: set[tuple[str, str]] = set()
    for i, part in enumerate(report.partial):
        where = f"partial[{i}]"
        if not _LAYER.fullmatch(part.layer):
            raise _invalid(f"{where}.layer", "a layer is named by its manifest digest, sha256:<64 hex>")
        if part.kind not in ("pull", "lazy"):
            raise _invalid(f"{where}.kind", "must be 'pull' (an interrupted pull) or 'lazy' (a lazy session)")
        if (part.layer, part.kind) in seen:
            raise _invalid(where, f"layer {part.layer} is listed twice as {part.kind}")
        seen.add((part.layer, part.kind))
        if not part.files or any(role not in mt.CHUNKED_FILES for role in part.files):
            raise _invalid(f"{where}.files", f"maps file roles ({', '.join(mt.CHUNKED_FILES)}) to bitmaps")
        if part.kind == "lazy" and set(part.files) != {mt.MEMORY_FILE}:
            raise _invalid(f"{where}.files", f"a lazy session holds part of {mt.MEMORY_FILE} only")
        for role, bitmap in part.files.items():
            if not 0 < bitmap.chunks <= MAX_CHUNKS:
                raise _invalid(f"{where}.files.{role}.chunks", f"must be between 1 and {MAX_CHUNKS}")
            try:
                bitmap.bits()
            except BitmapError as e:
                raise _invalid(f"{where}.files.{role}.present", str(e)) from None
    _check_facts(report.facts)
    return report


def _check_facts(facts: HostFacts) -> None:
    for name, value in (
        ("freeDisk", facts.free_disk),
        ("freeMemory", facts.free_memory),
        ("cpus", facts.cpus),
        ("downloadRate", facts.download_rate),
    ):
        if value is not None and not 0 <= value < 1 << 62:
            raise _invalid(f"facts.{name}", "must be a whole number from 0")
    if facts.load is not None and not 0 <= facts.load < 1e6:
        raise _invalid("facts.load", "must be a number from 0")
    if facts.arch is not None and not _FACT_TEXT.fullmatch(facts.arch):
        raise _invalid("facts.arch", "an architecture name such as x86_64")
    if len(facts.vmms) > MAX_VMMS:
        raise _invalid("facts.vmms", f"at most {MAX_VMMS} VMMs")
    for i, vmm in enumerate(facts.vmms):
        for key, text in vmm.compat().items():
            if not _FACT_TEXT.fullmatch(text):
                raise _invalid(f"facts.vmms[{i}].{key}", "1-64 characters from A-Z a-z 0-9 _ . + : -")
    if facts.peer_url is not None and (len(facts.peer_url) > MAX_PEER_URL or not _PEER_URL.fullmatch(facts.peer_url)):
        raise _invalid(
            "facts.peerUrl",
            f"an http:// or https:// URL of at most {MAX_PEER_URL} characters (host, port, path; no query or credentials)",
        )
    if len(facts.labels) > MAX_LABELS:
        raise _invalid("facts.labels", f"at most {MAX_LABELS} labels")
    for key, label in facts.labels.items():
        if len(key) > 253 or not _LABEL_KEY.fullmatch(key):
            raise _invalid("facts.labels", f"label key {key[:80]!r} is not a Kubernetes-style label key")
        if not _LABEL_VALUE.fullmatch(label):
            raise _invalid("facts.labels", f"label {key!r}: value {label[:80]!r} is not a Kubernetes-style label value")
