"""What ``forkd pull`` checks before it transfers any chunk (issue 16 item 11).

In order, each failure raised before a byte of snapshot data is fetched or staged:

1. :func:`check_arguments`: the ``--as`` tag follows the tag rules (before any request);
2. :func:`plan_pull`, once the chain's manifests and configs are in (metadata only):

   - the head's local tag: when it exists and holds something else than this layer (neither
     pulled from it nor holding its very files), the pull is refused (SnapshotExists) unless
     ``force`` — instead of failing at install after the whole transfer;
   - the layers this host already has: a local snapshot pulled from that very layer (under any tag),
     or whose files are exactly a link's (size and the sha256 its config states, as the local
     verified-content record knows them: pushed or imported here — nothing is hashed now), stands
     for that link, so the pull installs
     nothing for it and fetches nothing of it. A parent is used in place under its own tag
     (when its own parent is the link below); the head, held under another tag, has its
     chunks read locally (:func:`index_held_head`) and is installed under the pull's tag.

Errors: InvalidTag, SnapshotExists (forkd_client.errors); HubError from fetching chunk maps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from manifest.model import ChunkMap, LayerConfig, LayerManifest

from ..errors import InvalidSnapshotDir, SnapshotExists, SnapshotNotFound
from ..snapdir import FILE_ROLES, LocalSnapshot, validate_tag
from ..store import SnapshotStore
from .linkcheck import fetch_maps
from .localchunks import LocalChunkIndex
from .repository import ChainLink, RepositoryClient

__all__ = ["PullPlan", "check_arguments", "index_held_head", "plan_pull"]


def check_arguments(as_tag: str | None) -> None:
    """Refuse an invalid ``--as`` tag before contacting the hub. Raises InvalidTag."""
    if as_tag is not None:
        validate_tag(as_tag)


@dataclass
class PullPlan:
    """Local tags base → head, and the local snapshots standing for links this host already has."""

    tags: list[str]
    held: dict[str, LocalSnapshot] = field(default_factory=dict)
    """Local tag (in ``tags``) → the snapshot holding that link's files (not pulled from it)."""
    head_holder: LocalSnapshot | None = None
    """A snapshot under another tag holding the head's files: its chunks are read, not fetched."""

    def existing(self, tag: str) -> LocalSnapshot | None:
        return self.held.get(tag)


def holds(store: SnapshotStore, snap: LocalSnapshot, config: LayerConfig) -> bool:
    """Whether ``snap``'s files are exactly the layer's: same roles, sizes and sha256 (from the
    verified-content record only: a file it does not vouch for now does not match)."""
    for role in FILE_ROLES:
        path = snap.dir / role
        info = config.files.get(role)
        if info is None or not path.is_file():
            if info is not None or path.is_file():
                return False
            continue
        if info.sha256 is None or path.stat().st_size != info.size:
            return False
        if store.verified.cached(path).get("sha256") != info.sha256:
            return False
    return True


def _pulled_from(snap: LocalSnapshot, digest: str) -> bool:
    return (snap.origin or {}).get("manifest_digest") == digest


def plan_pull(
    store: SnapshotStore, parsed: list[tuple[ChainLink, LayerManifest, LayerConfig]], tags: list[str], *, force: bool
) -> PullPlan:
    """Check the local tags and find the links this host holds (see the module docstring).

    Raises SnapshotExists (the head's tag holds another snapshot, without ``force``).
    """
    local: list[LocalSnapshot] | None = None  # listed only when a link is not installed
    plan = PullPlan(list(tags))
    below: str | None = None  # the local tag standing for the previous link
    for i, (link, _, config) in enumerate(parsed):
        tag = plan.tags[i]
        head = i == len(parsed) - 1
        current = _get(store, tag)
        if current is not None and (_pulled_from(current, link.digest) or not head):
            below = tag  # installed from this layer (or a parent's tag, resolved by the pull)
            continue
        if current is not None and holds(store, current, config) and current.parent_tag == below:
            plan.held[tag] = current
            below = tag
            continue
        if current is not None and not force:
            raise SnapshotExists(
                tag,
                f"local snapshot {tag!r} already exists and holds something else than "
                f"{link.digest}: pull with --as ANOTHER_TAG, or --force to replace it",
            )
        if local is None:
            local = _readable_snapshots(store)
        holder = next(
            (s for s in local if s.parent_tag == below and (_pulled_from(s, link.digest) or holds(store, s, config))),
            None,
        )
        if holder is not None and not head:
            plan.tags[i] = holder.tag
            plan.held[holder.tag] = holder
            below = holder.tag
            continue
        if holder is not None:
            plan.head_holder = holder
        below = tag
    return plan


def index_held_head(
    store: SnapshotStore, repo: RepositoryClient, plan: PullPlan, link: tuple[ChainLink, LayerManifest, LayerConfig]
) -> None:
    """Record where the head's chunks sit in the local snapshot holding its files, so the pull
    reads them there (each re-hashed on read). Fetches the head's chunk maps (metadata only).
    Raises HubError, DigestInvalid."""
    if plan.head_holder is None:
        return
    maps: dict[str, ChunkMap] = fetch_maps(repo, *link)
    index = LocalChunkIndex(store.root / "chunk-index.db", store.verified)
    try:
        for role, chunk_map in maps.items():
            cs = chunk_map.chunk_size
            index.add(
                plan.head_holder.dir / role,
                (
                    (e.digest, e.index * cs, min(cs, chunk_map.size - e.index * cs))
                    for e in chunk_map.entries
                    if e.digest is not None
                ),
            )
    finally:
        index.close()


def _readable_snapshots(store: SnapshotStore) -> list[LocalSnapshot]:
    """Every local snapshot whose metadata reads (an unrelated damaged one is no reason to refuse a pull)."""
    out = []
    for tag in store.tags():
        try:
            out.append(store.get(tag))
        except (SnapshotNotFound, InvalidSnapshotDir):
            continue
    return out


def _get(store: SnapshotStore, tag: str) -> LocalSnapshot | None:
    try:
        return store.get(tag)
    except SnapshotNotFound:
        return None
