"""Talking to a hub: what ``login``, ``logout``, ``push``, ``pull``, ``search``, ``delete`` run.

Their parsers are in :mod:`.hub_commands`, which imports this module (httpx, cryptography and
the push/pull machinery) only when one of these commands runs.

The hub comes from the reference's host, else ``FORKD_HUB_URL``, else the default login (the first login, or one
made with ``--default``), and every command names the hub it talks to on stderr; the
token from ``FORKD_TOKEN``, else the stored login (``$XDG_CONFIG_HOME/forkd/credentials.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from manifest.chunking import DEFAULT_CHUNK_SIZE
from manifest.mediatypes import ROOTFS_FILE

from ..errors import ClientError, Interrupted, UsageError
from ..hub.account import check_push, not_found_hint
from ..hub.client import LOGIN_HINT, HubClient
from ..hub.credentials import Credentials, normalize_url
from ..hub.errors import HasDependents, HubError, InvalidReference, NotFound, TagConflict, Unauthorized
from ..hub.mirrors import mirrors_for
from ..hub.progress import FAILED, INTERRUPTED, REFUSED, Progress, make_progress
from ..hub.pull import pull
from ..hub.reference import Reference
from ..hub.retry import Retrier
from ..hub.signing import keys_for_pull
from ..node.state import record_pull_rate
from ..rootfs import missing_rootfs_warning
from ..snapdir import LocalSnapshot
from ..store import SnapshotStore
from .output import Context, human_size
from .summary import one_line

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ..lazy.profile import FileProfile

# A pull's start-up pays for every module imported here: what only push (its provenance and
# signing key, cryptography) or a forkd-registry pull needs is imported where those run.


def _client(
    ref: Reference | None,
    url: str | None = None,
    ctx: Context | None = None,
    notices: Context | None = None,
    *,
    mirrored: bool = False,
) -> HubClient:
    """The client for the hub this command talks to, which it names on stderr (unless ``ctx`` is None); its
    retries are told on ``ctx``'s stderr, or on ``notices``' (``--json`` keeps stdout for the JSON, not stderr
    quiet: a CI log shows what the command rode out). ``mirrored``: reads go through the hub's configured
    mirrors (``forkd_client/hub/mirrors.py``; a pull's, never a push's)."""
    creds = Credentials().resolve(url)
    base = ref.hub_url(creds.url) if ref is not None else creds.url
    if not base:
        raise HubError("no hub given: use HOST/ in the reference, 'forkd login URL' or FORKD_HUB_URL")
    token = creds.token if creds.url == base else Credentials().resolve(base).token
    mirrors = mirrors_for(base) if mirrored else []
    if ctx is not None:
        if ref is not None and ref.host is not None:
            source = "named in the reference"
        elif url:
            source = "--hub"
        elif os.environ.get("FORKD_HUB_URL"):
            source = "FORKD_HUB_URL"
        else:
            source = "the default login"
        through = f" through mirror(s) {', '.join(mirrors)}" if mirrors else ""
        print(f"Using hub {base} ({source}{', anonymous' if not token else ''}){through}", file=ctx.stderr)
        stderr = ctx.stderr
        return HubClient(
            base, token, retrier=Retrier(notice=lambda line: print(f"forkd: {line}", file=stderr)), mirrors=mirrors
        )
    if notices is not None:
        quiet_stderr = notices.stderr
        return HubClient(
            base,
            token,
            retrier=Retrier(notice=lambda line: print(f"forkd: {line}", file=quiet_stderr)),
            mirrors=mirrors,
        )
    return HubClient(base, token, mirrors=mirrors)


@contextlib.contextmanager
def _interruptible(progress: Progress, resume_hint: str) -> Iterator[None]:
    """Close ``progress`` when the block ends; on Ctrl-C leave the bars where they were and
    raise :class:`Interrupted` saying what can be resumed (the CLI exits 130). A hub's refusal (4xx: an
    immutable tag, a signature policy, a scope) is labelled as one, not as an interruption."""
    try:
        yield
    except KeyboardInterrupt:
        progress.close(finished=False, stopped=INTERRUPTED)
        raise Interrupted(resume_hint) from None
    except HubError as e:
        progress.close(finished=False, stopped=REFUSED if 400 <= e.status < 500 else FAILED)
        raise
    except BaseException:
        progress.close(finished=False, stopped=FAILED)
        raise
    progress.close()


def run_login(args: argparse.Namespace, ctx: Context) -> int:
    if args.token_stdin:
        token = sys.stdin.readline().strip()
        if not token:
            ctx.error(
                "--token-stdin: standard input was empty; pipe the token in, e.g. "
                "forkd-hub token create NAME --scope 'push:NS/*' | forkd login HUB_URL --token-stdin"
            )
            return 1
    else:
        token = args.token
        if not token and sys.stdin.isatty():  # as docker login does: asked for, never echoed
            import getpass

            token = getpass.getpass(f"Token for {args.url}: ").strip()
            if not token:
                ctx.error("no token given")
                return 1
        if not token:
            ctx.error("give the token with --token-stdin (recommended) or --token, or run forkd login on a terminal")
            return 2
    url = normalize_url(args.url)  # the URL stored below, never plain http by accident
    with HubClient(url, token) as client:
        try:
            client.ping()
        except Unauthorized as e:  # not "run forkd login": this is forkd login
            raise Unauthorized(
                f"{url} refused this token: {str(e).removesuffix(LOGIN_HINT)}",
                code=e.code,
                status=e.status,
                detail=e.detail,
            ) from None
    creds = Credentials()
    url = creds.login(url, token, make_default=args.make_default)
    ctx.print(f"Login succeeded: {url}")
    default = creds.default()
    if default == url:
        ctx.print(f"Default hub: {url}")
    else:
        ctx.print(f"Default hub stays {default} (make it {url} with 'forkd login {url} --default')")
    return 0


def run_logout(args: argparse.Namespace, ctx: Context) -> int:
    creds = Credentials()
    url = creds.logout(args.url)
    ctx.print(f"Removed login credentials for {url}" if url else "Not logged in")
    if url:
        default = creds.default()
        ctx.print(f"Default hub: {default}" if default else "No default hub (log in, or set FORKD_HUB_URL)")
    return 0


def run_push(args: argparse.Namespace, ctx: Context) -> int:
    ref = Reference.parse(args.ref)
    if ref.digest is not None:
        raise InvalidReference(
            f"{ref}: push to a tag, not a digest (the hub names what you push by its digest): "
            f"e.g. {ref.name}:{ref.tag or 'latest'}"
        )
    if args.profile_exec is not None and not args.record_profile:
        raise UsageError("--profile-exec is what --record-profile's child runs; it needs --record-profile")
    from ..hub.provenance import attach_provenance, ci_annotations, now_rfc3339, parse_annotations
    from ..hub.push import push

    if args.record_profile:
        from ..lazy.record import DEFAULT_PROFILE_EXEC

        args.profile_exec = args.profile_exec or DEFAULT_PROFILE_EXEC
    key = _signing_key(args.sign) if args.sign else None  # a bad key fails before any upload
    user_annotations = parse_annotations(args.annotation)  # a malformed one is a usage error, before any transfer
    annotations = {} if args.no_provenance else ci_annotations(os.environ)
    started = now_rfc3339()
    progress = make_progress(quiet=args.quiet or (args.json and not args.progress))
    with (
        ctx.store() as store,
        _client(ref, ctx=None if args.quiet or args.json else ctx, notices=None if args.quiet else ctx) as client,
    ):
        check_push(client, ref.name)  # a token that may not push there is refused before anything is built
        # recorded before any upload: a host that cannot (no FUSE, no VMM, a failing command) refuses early
        profile = _record_profile(store, args, progress) if args.record_profile else None
        try:
            with _interruptible(
                progress,
                f"push interrupted: what the hub committed is kept; run 'forkd push "
                f"{args.local_tag} {args.ref}' again to resume from there",
            ):
                result = push(
                    store,
                    client,
                    args.local_tag,
                    ref,
                    public=args.public,
                    progress=progress,
                    force=args.force,
                    sign=key,
                )
                if (annotations or user_annotations) and not args.no_provenance:
                    progress.log(f"{ref.name}: attaching provenance to {result.digest[:19]}…")
                    result.provenance = attach_provenance(
                        client.repository(ref.name),
                        result.tag,
                        [link.digest for link in result.links],
                        annotations=annotations,
                        user_annotations=user_annotations,
                        started=started,
                        forkd_version=forkd_version(),
                        sources=_chain_sources(store, args.local_tag),
                    )
                if profile is not None:
                    progress.log(f"{ref.name}: attaching the access profile to {result.digest[:19]}…")
                    result.profile = _attach_profile(client, ref.name, result.digest, profile, args.profile_exec)
        except TagConflict as e:  # exits 4 (conflict), like every 409
            if e.code == "TAG_IMMUTABLE":  # --force cannot move it: the hub's message says what to do
                raise
            raise TagConflict(
                f"{ref.name}:{ref.tag or 'latest'}: {e}; the layers are on the hub: push again to "
                "retry, or use --force to move the tag anyway",
                code=e.code,
                status=e.status,
                detail=e.detail,
            ) from None
    for warning in result.warnings:  # on stderr whatever the mode: an image the pulling host must provide
        ctx.warn(warning)
    if args.json:
        ctx.json(result.to_obj())
        return 0
    if args.quiet:  # -q: only what a script needs, the digest
        ctx.print(result.digest)
        return 0
    new = sum(1 for link in result.links if not link.skipped)
    ctx.print(f"{ref.name}:{ref.tag or 'latest'}: digest: {result.digest}")
    ctx.print(f"pushed {new} of {len(result.links)} layer(s), {human_size(result.bytes_sent)} sent")
    if result.provenance:
        ctx.print(f"provenance: {result.provenance['digest']} ({len(result.provenance['annotations'])} annotation(s))")
    if result.signature:
        ctx.print(f"signed: {result.signature} (a referrer of {result.digest[:19]}…)")
    if result.profile:
        got = result.profile
        disk = "" if got.get("rootfs_chunks") is None else f" of memory, {got['rootfs_chunks']} of the root filesystem"
        ctx.print(
            f"access profile: {got['digest']} ({got['chunks']} chunks{disk} read by {got['exec']!r}; "
            "lazy forks fetch them first)"
        )
    return 0


def _chain_sources(store: SnapshotStore, tag: str) -> dict[str, str]:
    """The annotations naming what the chain of ``tag`` was baked from (its nearest link that says)."""
    from ..images.provenance import SOURCE_KEYS

    for snap in reversed(store.chain(tag)):
        found = {k: v for k, v in snap.annotations.items() if k in SOURCE_KEYS}
        if found:
            return found
    return {}


def _record_profile(store: SnapshotStore, args: argparse.Namespace, progress: Progress) -> list[FileProfile]:
    """``--record-profile``: the chunks one child of the local head reads running ``--profile-exec``
    (of its memory image, then of its root filesystem when it has one). Raises what
    :func:`forkd_client.lazy.record.record_profile` raises."""
    from ..lazy.record import record_profile

    progress.log(f"{args.local_tag}: recording the access profile of one child running {args.profile_exec!r}…")
    return record_profile(store, args.local_tag, DEFAULT_CHUNK_SIZE, exec_cmd=args.profile_exec)


def _attach_profile(
    client: HubClient, name: str, head: str, profiles: list[FileProfile], cmd: str
) -> dict[str, object]:
    from ..lazy.profile import attach_profile

    repo = client.repository(name)
    manifest, _ = repo.get_manifest(head)
    memory, more = profiles[0], profiles[1:]
    digest = attach_profile(repo, head, len(manifest), memory.chunk_size, memory.chunks, more=more)
    disk = next((len(p.chunks) for p in more if p.file == ROOTFS_FILE), None)
    return {
        "digest": digest,
        "chunks": len(memory.chunks),
        "rootfs_chunks": disk,
        "chunk_size": DEFAULT_CHUNK_SIZE,
        "exec": cmd,
    }


def _signing_key(path: Path) -> Ed25519PrivateKey:
    """``--sign``'s key; an unreadable file is a SignatureError naming the option and the file."""
    from manifest.signature import SignatureError, load_private_key

    try:
        return load_private_key(path.expanduser())
    except OSError as e:
        raise SignatureError(f"--sign {path}: {e.strerror or e}") from None


def forkd_version() -> str:
    """This client's version, for provenance ("unknown" in a source tree without metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("forkd-hub")
    except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "unknown"


def run_pull(args: argparse.Namespace, ctx: Context) -> int:
    if getattr(args, "peers", False) and (args.lazy or args.hub or args.ref.startswith(("http://", "https://"))):
        raise UsageError("--peers works with a plain hub pull (NS/REPO[:TAG]), not with --lazy or forkd's --hub form")
    if args.lazy:
        from .lazycmds import run_lazy_pull

        return run_lazy_pull(args, ctx)
    if args.hub or args.ref.startswith(("http://", "https://")):
        if args.verify_key:  # forkd's registry has no signatures: never let a requested check pass silently
            ctx.error(
                "--verify-key needs a hub reference (NS/REPO[:TAG]); forkd's registry.json packs carry no signatures"
            )
            return 2
        return _run_forkd_pull(args, ctx)
    ref = Reference.parse(args.ref)
    verify_keys = keys_for_pull(ref.namespace, [p.expanduser() for p in args.verify_key])
    from ..hub.peers import peer_options

    peers = peer_options(getattr(args, "peers", False))
    progress = make_progress(quiet=args.quiet or args.json)
    with (
        ctx.store() as store,
        _client(
            ref, ctx=None if args.quiet or args.json else ctx, notices=None if args.quiet else ctx, mirrored=True
        ) as client,
    ):
        with _interruptible(
            progress,
            f"pull interrupted: installed links and verified chunks are kept; run "
            f"'forkd pull {args.ref}' again to resume from there",
        ):
            started = time.monotonic()
            try:
                result = pull(
                    store,
                    client,
                    ref,
                    as_tag=args.as_tag,
                    force=args.force,
                    progress=progress,
                    verify_keys=verify_keys,
                    peers=peers,
                )
            except NotFound as e:
                hint = not_found_hint(client, ref.name) if e.code == "NAME_UNKNOWN" else None
                if hint is None:
                    raise
                raise NotFound(f"{e}; {hint}", code=e.code, status=e.status, detail=e.detail) from None
        record_pull_rate(store, result.bytes_received, time.monotonic() - started)  # for placement (forkd node)
        warning = compat_warning(store.get(result.tag))  # the store still open: its records are not read again
        missing = [w for snap in store.chain(result.tag) if (w := missing_rootfs_warning(snap.tag, snap.dir))]
    if warning:
        ctx.warn(warning)
    for text in missing:
        ctx.warn(text)
    if args.json:
        ctx.json(result.to_obj())
        return 0
    if args.quiet:  # -q: only what a script needs, the digest
        ctx.print(result.digest)
        return 0
    if result.signed_by is not None:
        ctx.print(f"{ref}: signed by key {result.signed_by.key}")
    if result.up_to_date:
        ctx.print(f"{ref}: already up to date as {result.tag} ({result.digest})")
        return 0
    fetched = sum(link.bytes_fetched for link in result.links)
    ctx.print(f"{ref}: pulled as {result.tag} ({result.digest})")
    ctx.print(
        f"{len(result.links)} layer(s), {human_size(fetched)} of chunks fetched, {human_size(result.bytes_received)} received"
    )
    if peers is not None:
        by = result.bytes_by_source
        dropped = f"; {len(result.peers_dropped)} peer(s) dropped" if result.peers_dropped else ""
        ctx.print(
            f"chunks by source: {human_size(by['peers'])} from {len(result.bytes_by_peer)} peer(s), "
            f"{human_size(by['hub'])} from the hub, {human_size(by['local'])} local{dropped}"
        )
    return 0


def _run_forkd_pull(args: argparse.Namespace, ctx: Context) -> int:
    """forkd's ``pull --hub REGISTRY_URL owner/name[@version]`` (or a pack URL): registry, pack, unpack."""
    from ..hub.forkd_registry import pull_from_registry

    warnings: list[str] = []
    with ctx.store() as store:
        installed = pull_from_registry(store, args.hub, args.ref, tag=args.as_tag, force=args.force, warnings=warnings)
    for warning in warnings:
        ctx.warn(warning)
    if args.json:
        ctx.json([snap.to_obj() for snap in installed])
        return 0
    for snap in installed:
        ctx.print(f"Pulled: {snap.tag}")
    return 0


def compat_warning(snap: LocalSnapshot) -> str | None:
    """Why this host could not fork ``snap`` (recorded VMM, version, accelerator, memory…), or None.

    A pull only warns: the snapshot may be meant for another host; ``forkd fork`` refuses.
    """
    if not snap.compat:
        return None
    from vmm.errors import CompatibilityError, VmmError

    from ..vmmcompat import check_host_compat
    from ..vmops.host import make_driver

    try:
        driver = make_driver(str(snap.compat.get("vmm", "")) or None)
        status = driver.available()
        if not status.ok:
            return f"{snap.tag} was made with {snap.compat.get('vmm')}, which cannot run here: {status.reason}"
        check_host_compat(snap.compat, driver, memory=snap.dir / "memory.bin", what=f"snapshot {snap.tag}")  # type: ignore[arg-type]  # typing debt, decisions/0008
    except CompatibilityError as e:
        return f"{e}; 'forkd fork' will refuse it on this host"
    except (VmmError, ClientError, OSError) as e:
        return f"cannot check whether {snap.tag} can be forked here: {e}"
    return None


def run_search(args: argparse.Namespace, ctx: Context) -> int:
    with _client(None, args.hub, None if args.json else ctx) as client:
        repos = client.search(args.query, limit=args.limit)
    if args.json:
        ctx.json(repos)
        return 0
    rows = [
        [
            r.get("name", ""),
            "public" if r.get("public") else "private",
            ", ".join(r.get("tags", [])[:5]),
            one_line(r.get("description") or "", 80),  # Markdown, as one plain line
        ]
        for r in repos
    ]
    ctx.table(["NAME", "VISIBILITY", "TAGS", "DESCRIPTION"], rows, flexible=("TAGS", "DESCRIPTION"))
    return 0


def run_delete(args: argparse.Namespace, ctx: Context) -> int:
    ref = Reference.parse(args.ref)
    with _client(ref, ctx=None if args.json else ctx) as client:
        try:
            body = client.repository(ref.name).delete(ref.ref, cascade=args.cascade, force=args.force)
        except HasDependents as e:  # exits 4 (conflict), like every 409
            names = ", ".join(f"{d.get('repository')}:{d.get('tag') or d.get('digest')}" for d in e.dependents)
            raise HasDependents(
                f"{ref} has dependents: {names or e}; use --cascade to delete them too or --force",
                code=e.code,
                status=e.status,
                detail=e.detail,
            ) from None
    if args.json:
        ctx.json(body)
    else:
        ctx.print(f"Deleted {ref}")
    return 0
