"""The one way snapshots enter the store: stage, prepare, commit.

Every install (import, tag, compact, unpack, pull) follows the same three steps, so a
crash at any point leaves either the old state or the new one, never a half snapshot:

1. :meth:`StoreBase.staging` gives a fresh directory under ``<root>/.staging/`` (same
   filesystem as ``snapshots/``, so the final step is a rename). The caller puts the
   snapshot's files there: clones, moved files, extracted or assembled images.
2. :meth:`StoreBase.prepare` settles the files' mtimes, records digests already known
   and computes the missing ones through the VerifiedRecord, writes snapshot.json (paths
   already pointing at the final directory) and forkd-hub.json, and fsyncs.
3. :meth:`StoreBase.commit` takes ``<root>/.lock``, checks every destination, and
   renames the prepared directories into ``snapshots/`` (all of them or none).

Staging directories are named ``<pid>-<what>-<random>``; ones left by dead processes are
swept when the next staging directory is made. :meth:`StoreBase.resumable_staging` gives
``resume-<key>`` instead: kept when the operation is interrupted, so a killed pull resumes
from its partial files, locked while in use, swept after a week unused.

Every change of ``snapshots/`` (and ``forkd prune``) counts itself in ``<root>/.changes``
(:meth:`StoreBase.note_change`): a running ``forkd node serve`` reports the host's inventory after it.

Errors: forkd_client.errors (InvalidTag, SnapshotExists, SnapshotNotFound,
InvalidSnapshotDir), OSError.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from manifest.chunking import DEFAULT_CHUNK_SIZE
from manifest.fileops import clone_file
from manifest.mediatypes import MEMORY_FILE, ROOTFS_FILE, VMSTATE_FILE

from .config import forkd_home
from .errors import InvalidSnapshotDir, InvalidTag, SnapshotExists, SnapshotNotFound
from .snapdir import (
    FILE_ROLES,
    SNAPSHOT_JSON,
    FileRecord,
    HubMeta,
    LocalSnapshot,
    is_snapshot_dir,
    read_json_object,
    rfc3339,
    snapshot_json_for,
    validate_existing_tag,
    validate_tag,
    write_hub_meta,
    write_snapshot_json,
)
from .verified import VerifiedRecord

BOTH_DIGESTS = ("blake3", "sha256")
#: The store's change counter (:meth:`StoreBase.note_change`), read by ``forkd node serve``.
CHANGES_FILE = ".changes"


@dataclass(frozen=True)
class PrepareSpec:
    """What :meth:`StoreBase.prepare` records for one staged snapshot.

    ``tag``: the snapshot's tag (new-tag rules; with ``forkd_cli_tag`` also the tags forkd's CLI
    accepts, dots allowed: what ``forkd unpack`` installs). ``parent``, ``parent_content_hash``
    (forkd's sha256 of the parent's memory.bin) and ``parent_digest`` (its blake3) or
    ``parent_tree`` (its chunk-tree digest ``(chunk size, digest)``, a format v2 pull) for a link.
    ``compat``, ``annotations``, ``origin`` and ``created`` go to forkd-hub.json.
    ``known_digests`` ({role: {algorithm: digest}}, e.g. verified while streaming) are recorded
    as trusted; ``algorithms`` are computed for every file role. ``snapshot_json`` replaces the
    staged snapshot.json; ``local_dirs`` as in :func:`~forkd_client.snapdir.snapshot_json_for`.
    """

    tag: str
    parent: str | None = None
    parent_content_hash: str | None = None
    parent_digest: str | None = None
    parent_tree: tuple[int, str] | None = None
    compat: Mapping[str, Any] | None = None
    annotations: Mapping[str, str] | None = None
    origin: Mapping[str, str] | None = None
    created: str | None = None
    known_digests: Mapping[str, Mapping[str, str]] | None = None
    algorithms: Sequence[str] = BOTH_DIGESTS
    snapshot_json: Mapping[str, Any] | None = None
    local_dirs: tuple[Path, ...] = ()
    forkd_cli_tag: bool = False
    files_durable: bool = False


SETTLE_NS = 3_000_000_000  # beyond VerifiedRecord's largest racy window (2 s)


RESUME_PREFIX = "resume-"
RESUME_MAX_AGE_S = 7 * 24 * 3600
_RESUME_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")


class StoreBase:
    """Layout, locking and the install path of a :class:`~forkd_client.store.SnapshotStore`."""

    def __init__(self, root: str | os.PathLike[str] | None = None, *, durable: bool = True) -> None:
        # absolute: snapshot.json's paths are derived from it, and forkd's daemon (cwd /) reads them
        self.root = Path(os.path.abspath(root if root is not None else forkd_home()))
        self.snapshots_dir = self.root / "snapshots"
        self.staging_root = self.root / ".staging"
        self.verified_path = self.root / "verified.db"
        self.durable = durable  # fsync files and directories before they become visible
        self._verified: VerifiedRecord | None = None

    # ------------------------------------------------------------------ plumbing

    @property
    def verified(self) -> VerifiedRecord:
        if self._verified is None:
            self._verified = VerifiedRecord(self.verified_path)
        return self._verified

    def close(self) -> None:
        if self._verified is not None:
            self._verified.close()
            self._verified = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path(self, tag: str) -> Path:
        """Where snapshot ``tag`` lives (whether or not it exists). Raises InvalidTag."""
        return self.snapshots_dir / validate_existing_tag(tag)

    def exists(self, tag: str) -> bool:
        return is_snapshot_dir(self.path(tag))

    def _dir(self, tag: str) -> Path:
        path = self.path(tag)
        if not is_snapshot_dir(path):
            raise SnapshotNotFound(tag)
        return path

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def note_change(self) -> None:
        """Count a change of what this store holds in ``<root>/.changes`` (a decimal counter): ``forkd node
        serve`` reads it to report the host's inventory after every pull, removal or prune. A hint only:
        a counter lost in a crash costs a report that comes with the agent's next heartbeat instead."""
        path = self.root / CHANGES_FILE
        try:
            count = int(path.read_text() or 0)
        except (OSError, ValueError):
            count = 0
        with contextlib.suppress(OSError):  # a read-only or full disk must not fail the change itself
            path.write_text(str(count + 1))

    def changes(self) -> int:
        """The change counter :meth:`note_change` keeps (0 before the first change)."""
        try:
            return int((self.root / CHANGES_FILE).read_text() or 0)
        except (OSError, ValueError):
            return 0

    def _scratch_name(self, what: str) -> Path:
        return self.staging_root / f"{os.getpid()}-{what}-{secrets.token_hex(4)}"

    @contextmanager
    def staging(self, what: str) -> Iterator[Path]:
        """A fresh directory under ``.staging/``, deleted on exit unless it was installed (renamed away)."""
        self.staging_root.mkdir(parents=True, exist_ok=True)
        self._sweep_staging()
        path = self._scratch_name(what)
        path.mkdir()
        try:
            yield path
        finally:
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                if self._verified is not None:
                    self._verified.forget(path)

    @contextmanager
    def resumable_staging(self, key: str) -> Iterator[Path]:
        """A staging directory an interrupted operation leaves for the next attempt at the same
        ``key`` (``[A-Za-z0-9_-]``, e.g. derived from a layer digest) to resume from.

        It is locked while in use; when another process holds it, a fresh directory (deleted
        on exit) is used instead. On exit it is kept, whatever happened, unless it was
        installed (renamed away): the caller decides on entry whether what it holds is usable.
        Ones left unused for RESUME_MAX_AGE_S are swept. Raises OSError.
        """
        if not _RESUME_KEY.fullmatch(key):
            raise ValueError(f"invalid resumable staging key {key!r}")
        self.staging_root.mkdir(parents=True, exist_ok=True)
        self._sweep_staging()
        path = self.staging_root / f"{RESUME_PREFIX}{key}"
        path.mkdir(exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            with self.staging(key) as fresh:
                yield fresh
            return
        try:
            os.utime(path)  # in use now: not swept for another RESUME_MAX_AGE_S
            yield path
        finally:
            os.close(fd)

    def _sweep_staging(self) -> None:
        """Delete what dead processes left in ``.staging/`` (names start with their pid), and
        resumable directories nobody has used for RESUME_MAX_AGE_S."""
        now = time.time()
        for entry in os.scandir(self.staging_root):
            pid = entry.name.split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name.startswith(RESUME_PREFIX) and now - _mtime(entry) > RESUME_MAX_AGE_S:
                _remove_unless_locked(Path(entry.path))

    # ------------------------------------------------------------------ installing

    def prepare(self, staged: Path, spec: PrepareSpec) -> Path:
        """Make the staged directory ``staged`` a complete snapshot ``spec.tag``, ready for :meth:`commit`.

        Settles each file's mtime (see :func:`settle_mtime`), records ``spec.known_digests``,
        computes ``spec.algorithms`` for every file role present (through the VerifiedRecord:
        only what is not trusted yet), and writes snapshot.json (from ``spec.snapshot_json`` or
        the staged one, unknown fields kept, paths pointing at the final directory) and
        forkd-hub.json. A link records ``spec.parent_digest``, the blake3 of its parent's
        memory.bin (given, else from the VerifiedRecord), so that chain checks need no sha256; or
        ``spec.parent_tree``, its chunk-tree digest ``(chunk size, digest)`` (a format v2 pull), and
        then no blake3 is looked for. A file whose chunk-tree digest the VerifiedRecord holds
        (recorded by the caller) records it too. ``spec.files_durable``: the caller fsynced every
        file after its last write (its mtime settled first), so they are not fsynced again; the
        metadata and the directory still are. See :class:`PrepareSpec` for every field.
        Raises InvalidTag, InvalidSnapshotDir, OSError.
        """
        tag, parent, parent_digest, known_digests = spec.tag, spec.parent, spec.parent_digest, spec.known_digests
        parent_tree = spec.parent_tree
        (validate_existing_tag if spec.forkd_cli_tag else validate_tag)(tag)
        for role in (VMSTATE_FILE, MEMORY_FILE):
            if not (staged / role).is_file():
                raise InvalidSnapshotDir(f"snapshot {tag!r} lacks {role}")
        files: dict[str, FileRecord] = {}
        for role in FILE_ROLES:
            path = staged / role
            if not path.is_file():
                continue
            settle_mtime(path)
            if self.durable and not spec.files_durable:
                fsync_path(path)
            if known_digests and role in known_digests:
                self.verified.record(path, known_digests[role])
            digests = {**self.verified.cached(path), **self.verified.digests(path, spec.algorithms)}
            files[role] = FileRecord(
                path.stat().st_size, digests.get("blake3"), digests.get("sha256"), self.verified.cached_tree(path)
            )
        base = dict(spec.snapshot_json) if spec.snapshot_json is not None else read_json_object(staged / SNAPSHOT_JSON)
        doc = snapshot_json_for(
            self.snapshots_dir / tag,
            base,
            parent_tag=parent,
            parent_content_hash=spec.parent_content_hash,
            has_rootfs=ROOTFS_FILE in files,
            local_dirs=(staged, *spec.local_dirs),
        )
        write_snapshot_json(staged, doc)
        if (
            parent is not None
            and parent_digest is None
            and parent_tree is None
            and (self.snapshots_dir / parent / MEMORY_FILE).is_file()
        ):
            parent_digest = self.verified.digests(self.snapshots_dir / parent / MEMORY_FILE, ("blake3",))["blake3"]
        meta = HubMeta(
            tag,
            parent,
            spec.created or rfc3339(),
            DEFAULT_CHUNK_SIZE,
            dict(spec.compat or {}),
            dict(spec.annotations or {}),
            files,
            dict(spec.origin) if spec.origin else None,
            parent_digest if parent is not None else None,
            parent_tree if parent is not None else None,
        )
        write_hub_meta(staged, meta)
        if self.durable:
            fsync_path(staged)
        return staged

    def commit(
        self, items: Sequence[tuple[Path, str]], *, force: bool = False, forkd_cli_tag: bool = False
    ) -> list[LocalSnapshot]:
        """Rename prepared directories into ``snapshots/`` as the given tags, all or nothing.

        Every destination is checked before anything moves. With ``force`` an existing
        snapshot of the same tag is replaced (moved out, then deleted). If a rename fails,
        what was already moved is moved back. ``forkd_cli_tag`` as for :meth:`prepare`.
        Raises SnapshotExists, InvalidTag, OSError.
        """
        tags = [(validate_existing_tag if forkd_cli_tag else validate_tag)(tag) for _, tag in items]
        if len(set(tags)) != len(tags):
            raise InvalidTag(f"the same tag is installed twice in one commit: {tags}")
        self.snapshots_dir.mkdir(parents=True, exist_ok=True)
        displaced: list[tuple[Path, Path]] = []
        done: list[tuple[Path, Path]] = []
        with self._locked():
            for tag in tags:
                if os.path.lexists(self.snapshots_dir / tag) and not force:
                    raise SnapshotExists(tag)
            try:
                for staged, tag in items:
                    final = self.snapshots_dir / tag
                    if os.path.lexists(final):
                        trash = self._scratch_name(f"replaced-{tag}")
                        os.rename(final, trash)
                        displaced.append((final, trash))
                        self.verified.rename(final, trash)
                    os.rename(staged, final)
                    done.append((staged, final))
                    self.verified.rename(staged, final)
            except BaseException:
                for staged, final in reversed(done):
                    os.rename(final, staged)
                    self.verified.rename(final, staged)
                for final, trash in reversed(displaced):
                    os.rename(trash, final)
                    self.verified.rename(trash, final)
                raise
            if self.durable:
                fsync_path(self.snapshots_dir)
            self.note_change()
        for _, trash in displaced:
            shutil.rmtree(trash, ignore_errors=True)
            self.verified.forget(trash)
        return [self.get(tag) for tag in tags]

    def get(self, tag: str) -> LocalSnapshot:
        """The installed snapshot ``tag`` (implemented by SnapshotStore, which reads it back)."""
        raise NotImplementedError


def _mtime(entry: os.DirEntry) -> float:
    try:
        return entry.stat().st_mtime
    except OSError:  # swept by another process meanwhile
        return time.time()


def _remove_unless_locked(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        shutil.rmtree(path, ignore_errors=True)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an exited process not reaped yet holds
    no lock, maps no file and will never finish its work)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def fsync_path(path: Path) -> None:
    """fsync a file or directory by path."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def clone_into(src: Path, dst: Path) -> None:
    """Clone ``src`` to the new file ``dst`` (reflink / copy_file_range, holes kept), keeping its times."""
    clone_file(src, dst)
    st = os.stat(src)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def settle_mtime(path: Path) -> None:
    """Move a file's mtime at least SETTLE_NS into the past (never forward).

    Files the store writes are its own until installed, so nothing is lost. In return the
    VerifiedRecord never sees them as "racy" (modified within a timestamp tick of being
    hashed), so what is recorded at install is trusted at once, and any later in-place
    write, which stamps the current time, changes the fingerprint and is detected.
    """
    st = os.stat(path)
    limit = time.time_ns() - SETTLE_NS
    if st.st_mtime_ns > limit:
        os.utime(path, ns=(st.st_atime_ns, limit))
