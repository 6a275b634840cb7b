"""The local snapshot store: forkd-compatible snapshot directories plus our records.

Layout (``root`` defaults to :func:`forkd_client.config.forkd_home`, which is forkd's own
data dir, so an unmodified forkd daemon lists and forks what we install)::

    <root>/
      snapshots/
        <tag>/               one snapshot (see forkd_client.snapdir for the files)
          snapshot.json        forkd's metadata (paths, parent_tag, parent_content_hash)
          vmstate
          memory.bin           full guest RAM image (chain links too, like forkd's)
          rootfs.ext4          optional
          forkd-hub.json       our metadata (created, compat, annotations, file digests, origin)
      chunk-index.db         LocalChunkIndex: where chunks of installed snapshots are
      verified.db            VerifiedRecord: digests trusted while a file's stat is unchanged
      .staging/              same-filesystem scratch for atomic installs and removals
        <pid>-<what>-<rand>/   never listed; left-overs of dead processes are swept
        resume-<key>/          an interrupted pull's partial files, for the next attempt
      .lock                  flock(2) held while snapshots/ is changed
      .changes               a counter of those changes, read by ``forkd node serve``

Every change to ``snapshots/`` is a ``rename(2)`` of a complete directory prepared in
``.staging/``: installs (import, tag, compact, unpack, later pull) prepare all files and
metadata first, then rename; removals rename out of ``snapshots/`` first, then delete. A
crash never leaves a half snapshot visible.

Errors (forkd_client.errors): InvalidTag, SnapshotNotFound, SnapshotExists,
DependentsExist, ChainBroken, ParentContentMismatch, InvalidSnapshotDir; OSError from
the filesystem.
"""

from __future__ import annotations

import builtins
import itertools
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from manifest.chain import resolve_chain
from manifest.chunktree import file_chunk_tree
from manifest.digest import digest_file
from manifest.errors import ChainCycle, ChainTooDeep, MissingParent
from manifest.holes import unsafe_holes
from manifest.mediatypes import MEMORY_FILE

from .errors import (
    ChainBroken,
    DependentsExist,
    FileContentMismatch,
    InvalidSnapshotDir,
    ParentContentMismatch,
    UnsafeLinkHoles,
)
from .install import StoreBase
from .snapdir import (
    FILE_ROLES,
    FileRecord,
    LocalSnapshot,
    dir_sizes,
    is_existing_tag,
    is_snapshot_dir,
    read_hub_meta,
    read_parent,
    rfc3339,
    validate_existing_tag,
)

__all__ = ["LocalSnapshot", "SnapshotStore"]


class SnapshotStore(StoreBase):
    """Local snapshots under ``root``. Not thread-safe; processes coordinate through ``.lock``.

    Layout, locking and the install path (``staging``, ``prepare``, ``commit``) come from
    :class:`~forkd_client.install.StoreBase`.
    """

    # ------------------------------------------------------------------ reading

    def tags(self) -> list[str]:
        """Tags of every snapshot directory, sorted (names no forkd tool accepts are ignored)."""
        try:
            names = os.listdir(self.snapshots_dir)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if is_existing_tag(n) and is_snapshot_dir(self.snapshots_dir / n))

    def get(self, tag: str) -> LocalSnapshot:
        """The snapshot ``tag``. Raises SnapshotNotFound, InvalidTag, InvalidSnapshotDir."""
        directory = self._dir(tag)
        parent, content_hash = read_parent(directory)
        meta = read_hub_meta(directory)
        logical, disk = dir_sizes(directory)
        trusted = self._verified is not None or self.verified_path.exists()
        files: dict[str, FileRecord] = {}
        for role in FILE_ROLES:
            try:
                size = (directory / role).stat().st_size
            except FileNotFoundError:
                continue
            cached = self.verified.cached(directory / role) if trusted else {}
            recorded = meta.files.get(role) if meta else None
            files[role] = FileRecord(
                size,
                cached.get("blake3") or (recorded.digest if recorded else None),
                cached.get("sha256") or (recorded.sha256 if recorded else None),
                recorded.chunk_tree if recorded else None,
            )
        return LocalSnapshot(
            tag=tag,
            dir=directory,
            parent_tag=parent,
            parent_content_hash=content_hash,
            created=meta.created if meta else rfc3339(directory.stat().st_mtime),
            logical_size=logical,
            disk_size=disk,
            compat=dict(meta.compat) if meta else {},
            annotations=dict(meta.annotations) if meta else {},
            files=files,
            origin=meta.origin if meta else None,
            managed=meta is not None,
            # only while forkd's snapshot.json still names the parent the link was made from
            parent_digest=meta.parent_digest if meta and parent is not None and meta.parent_tag == parent else None,
            parent_tree=meta.parent_tree if meta and parent is not None and meta.parent_tag == parent else None,
        )

    def list(self) -> list[LocalSnapshot]:
        """Every local snapshot, sorted by tag. Raises InvalidSnapshotDir for unreadable metadata."""
        return [self.get(tag) for tag in self.tags()]

    def _parent_map(self) -> dict[str, str | None]:
        """tag → parent tag for every snapshot; unreadable metadata counts as no parent."""
        parents: dict[str, str | None] = {}
        for tag in self.tags():
            try:
                parents[tag] = read_parent(self.snapshots_dir / tag)[0]
            except InvalidSnapshotDir:
                parents[tag] = None
        return parents

    def dependents(self, tag: str) -> builtins.list[str]:
        """Snapshots whose parent is ``tag`` (direct children), sorted."""
        validate_existing_tag(tag)
        return sorted(t for t, p in self._parent_map().items() if p == tag and t != tag)

    def descendants(self, tag: str) -> builtins.list[str]:
        """Every snapshot chained on ``tag``, nearest first (children, then grandchildren …)."""
        validate_existing_tag(tag)
        return _descendants(tag, self._parent_map())

    def chain(self, tag: str) -> builtins.list[LocalSnapshot]:
        """The chain ending at ``tag``, base first.

        Raises SnapshotNotFound (``tag`` itself), ChainBroken (a parent is missing, the
        parents loop, or the chain is deeper than 32), InvalidSnapshotDir.
        """
        return [self.get(t) for t in self._chain_tags(tag)]

    def depth(self, tag: str) -> int:
        """Number of snapshots in the chain ending at ``tag`` (a base has depth 1). Raises as :meth:`chain`."""
        return len(self._chain_tags(tag))

    def _chain_tags(self, tag: str) -> builtins.list[str]:
        self._dir(tag)
        parents: dict[str, str | None] = {}

        def parent_of(t: str) -> str | None:
            directory = self.snapshots_dir / t
            if not is_snapshot_dir(directory):
                raise LookupError(t)
            parents[t] = read_parent(directory)[0]
            return parents[t]

        try:
            return resolve_chain(tag, parent_of)
        except MissingParent:
            link = next(t for t, p in parents.items() if p is not None and p not in parents)
            missing = parents[link]
            raise ChainBroken(
                f"chain of {tag!r} is broken: {link!r} names parent {missing!r}, which is missing",
                link=link,
                missing=missing,
            ) from None
        except (ChainCycle, ChainTooDeep) as e:
            raise ChainBroken(f"chain of {tag!r} cannot be resolved: {e}", link=tag) from None

    def memory_sha256(self, tag: str) -> str:
        """Lowercase hex sha256 of ``tag``'s memory.bin, hashed only if not already verified."""
        path = self._dir(tag) / MEMORY_FILE
        if not path.is_file():
            raise InvalidSnapshotDir(f"snapshot {tag!r} has no {MEMORY_FILE} ({path})")
        return self.verified.digests(path, ("sha256",))["sha256"].split(":", 1)[1]

    def verify_chain(self, tag: str, *, forkd_hashes: bool = False) -> builtins.list[LocalSnapshot]:
        """Check every link against its parent's memory.bin; return the chain.

        A link we made records the blake3 of the parent it was made from (``parent_digest``), or
        (a format v2 pull) its chunk-tree digest (``parent_tree``): that is checked, plus forkd's
        ``parent_content_hash`` (sha256) when the parent's sha256 is already known. A link without it (made by forkd) is checked by sha256, as forkd does.
        ``forkd_hashes`` checks every ``parent_content_hash`` as forkd will at spawn, hashing
        sha256 where it is not known yet, and that no link has a hole where its parent holds
        data (forkd would assemble the parent's bytes there). Parents verified before and
        unchanged since are not read again (VerifiedRecord). Raises ParentContentMismatch naming
        child, parent, expected and actual hash, UnsafeLinkHoles, and whatever :meth:`chain` raises.
        """
        chain = self.chain(tag)
        for parent, child in itertools.pairwise(chain):
            memory = parent.dir / MEMORY_FILE
            if child.parent_digest is not None or child.parent_tree is not None:
                trusted = self.verified.cached(memory)  # one stat and one row when nothing changed
                if child.parent_tree is not None:  # recorded at install: read only when the file changed
                    size, wanted = child.parent_tree
                    actual = self.verified.chunk_tree(memory, size)
                else:
                    wanted = child.parent_digest  # type: ignore[assignment]  # one of the two is set
                    actual = trusted.get("blake3") or self.verified.digests(memory, ("blake3",))["blake3"]
                if actual != wanted:
                    raise ParentContentMismatch(child.tag, parent.tag, wanted, actual)
                if not forkd_hashes and ("sha256" not in trusted or child.parent_content_hash is None):
                    continue
            actual = self.memory_sha256(parent.tag)
            if child.parent_content_hash != actual:
                raise ParentContentMismatch(child.tag, parent.tag, child.parent_content_hash, actual)
        if forkd_hashes:
            for parent, child in itertools.pairwise(chain):
                unsafe = unsafe_holes(child.dir / MEMORY_FILE, parent.dir / MEMORY_FILE)
                if unsafe:
                    raise UnsafeLinkHoles(child.tag, parent.tag, unsafe)
        return chain

    def verify_files_deep(self, tag: str) -> builtins.list[LocalSnapshot]:
        """Hash every file of every link of ``tag``'s chain again, in full, trusting no record,
        and compare with the digests its forkd-hub.json records (blake3, and sha256 where known; the
        chunk tree where a pull recorded it). Raises FileContentMismatch naming tag, file, expected
        and actual digest; OSError."""
        chain = self.chain(tag)
        for snap in chain:
            for role, record in snap.files.items():
                if record.chunk_tree is not None:
                    size, tree = record.chunk_tree
                    got_tree = file_chunk_tree(snap.dir / role, size)
                    if got_tree != tree:
                        raise FileContentMismatch(snap.tag, role, tree, got_tree)
                wanted = {a: d for a, d in (("blake3", record.digest), ("sha256", record.sha256)) if d}
                if not wanted:
                    continue
                got = digest_file(snap.dir / role, tuple(wanted))
                for algorithm, digest in wanted.items():
                    if str(got[algorithm]) != digest:
                        raise FileContentMismatch(snap.tag, role, digest, str(got[algorithm]))
        return chain

    # ------------------------------------------------------------------ operations

    def import_snapshot(
        self,
        src_dir: str | os.PathLike[str],
        tag: str,
        *,
        parent: str | None = None,
        move: bool = False,
        force: bool = False,
        compat: Mapping[str, Any] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> LocalSnapshot:
        """Install the snapshot files in ``src_dir`` as ``tag`` (a chain link when ``parent`` is given).

        See :func:`forkd_client.importing.import_snapshot`.
        """
        from .importing import import_snapshot

        return import_snapshot(
            self, Path(src_dir), tag, parent=parent, move=move, force=force, compat=compat, annotations=annotations
        )

    def tag(self, src: str, dst: str) -> LocalSnapshot:
        """A new snapshot ``dst`` whose files are clones of ``src``'s (same parent).

        Raises SnapshotNotFound, SnapshotExists, InvalidTag, OSError.
        """
        from .importing import clone_snapshot

        return clone_snapshot(self, src, dst)

    def compact(self, src: str, dst: str) -> LocalSnapshot:
        """Verify ``src``'s chain, then write ``dst``: a base equal to ``src``'s assembled image.

        Raises ChainBroken, ParentContentMismatch, SnapshotNotFound, SnapshotExists, InvalidTag.
        """
        from .importing import compact

        return compact(self, src, dst)

    def pack(
        self, tag: str, out: str | os.PathLike[str], *, description: str | None = None, base_image: str | None = None
    ) -> Path:
        """Write ``tag`` (with its whole chain) as a forkd pack. See :func:`forkd_client.packs.pack`."""
        from .packs import pack

        return pack(self, tag, Path(out), description=description, base_image=base_image)

    def unpack(
        self,
        file: str | os.PathLike[str],
        *,
        tag: str | None = None,
        force: bool = False,
        warnings: builtins.list[str] | None = None,
    ) -> builtins.list[LocalSnapshot]:
        """Install a forkd pack; returns the installed snapshots root → head. See :func:`forkd_client.packs.unpack`."""
        from .packs import unpack

        return unpack(self, Path(file), tag=tag, force=force, warnings=warnings)

    def remove(self, tag: str, *, cascade: bool = False, force: bool = False) -> builtins.list[str]:
        """Remove ``tag``; returns the removed tags in removal order.

        Refuses with DependentsExist when other snapshots chain on it. ``cascade`` also
        removes every descendant (leaves first); ``force`` removes only ``tag`` and leaves
        its dependents broken. Both at once raise ValueError. Raises SnapshotNotFound.
        """
        if cascade and force:
            raise ValueError("cascade and force are mutually exclusive")
        with self._locked():
            self._dir(tag)
            parents = self._parent_map()
            children = sorted(t for t, p in parents.items() if p == tag and t != tag)
            if children and not (cascade or force):
                raise DependentsExist(tag, children)
            targets = [*reversed(_descendants(tag, parents)), tag] if cascade else [tag]
            self.staging_root.mkdir(parents=True, exist_ok=True)
            for target in targets:
                final = self.snapshots_dir / target
                trash = self._scratch_name(f"removed-{target}")
                os.rename(final, trash)  # gone from snapshots/ in one step
                shutil.rmtree(trash, ignore_errors=True)
                if self._verified is not None or self.verified_path.exists():
                    self.verified.forget(final)
            self.note_change()
        return targets


def _descendants(tag: str, parents: Mapping[str, str | None]) -> list[str]:
    children: dict[str, list[str]] = {}
    for t, p in parents.items():
        if p is not None:
            children.setdefault(p, []).append(t)
    out: list[str] = []
    seen = {tag}
    frontier = [tag]
    while frontier:
        nxt = []
        for t in frontier:
            for c in sorted(children.get(t, ())):
                if c not in seen:
                    seen.add(c)
                    out.append(c)
                    nxt.append(c)
        frontier = nxt
    return out
