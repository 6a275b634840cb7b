"""A layer config's ``forkd`` object: forkd's snapshot.json fields a pull cannot derive.

They travel verbatim (``volumes``, a ``rootfs`` outside the snapshot directory, unknown fields;
docs/manifest-format.md §5) so that snapshot.json round-trips through push and pull.

Errors: :class:`~manifest.errors.InvalidManifest`.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidManifest

#: deepest nesting accepted in a config's free-form ``forkd`` object (forkd's own is 3 levels)
MAX_FORKD_DEPTH = 32


def _depth(obj: Any) -> int:
    """How deeply ``obj`` (parsed JSON) nests lists and objects, counted without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, level)
            stack.extend((item, level + 1) for item in (value.values() if isinstance(value, dict) else value))
    return deepest


#: snapshot.json fields every install writes itself (paths into the snapshot directory, the chain):
#: never carried in a config's ``forkd`` object
FORKD_DERIVED = frozenset({"vmstate", "memory", "parent_tag", "parent_content_hash"})


def check_forkd_fields(forkd: dict[str, Any], p: str) -> None:
    """A config's ``forkd`` object must be what forkd's serde ``Snapshot`` parses (else forkd could not
    load the installed snapshot.json): no derived field, ``volumes`` a list of
    ``{host_path: str, guest_path: str, read_only?: bool}``, ``rootfs`` a string."""
    if set(forkd) & FORKD_DERIVED:
        raise InvalidManifest(f"{p} must not hold {sorted(set(forkd) & FORKD_DERIVED)} (derived on install)")
    volumes = forkd.get("volumes", [])
    if not isinstance(volumes, list) or not all(
        isinstance(v, dict)
        and isinstance(v.get("host_path"), str)
        and isinstance(v.get("guest_path"), str)
        and isinstance(v.get("read_only", False), bool)
        for v in volumes
    ):
        raise InvalidManifest(f"{p}.volumes must be a list of {{host_path, guest_path, read_only}} objects")
    if "rootfs" in forkd and not isinstance(forkd["rootfs"], str):
        raise InvalidManifest(f"{p}.rootfs must be a path string")
    if _depth(forkd) > MAX_FORKD_DEPTH:  # written back out as snapshot.json: json.dumps must be able to follow it
        raise InvalidManifest(f"{p} is nested deeper than {MAX_FORKD_DEPTH} levels")
