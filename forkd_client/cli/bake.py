"""Baking real environments: ``forkd from-image`` and ``forkd from-debian`` (see docs/cli.md).

Both build (or find in the cache) an ext4 root filesystem with :mod:`forkd_client.images`, boot a copy
of it as the guest's root with the project's kernel and agent, run the ``--exec`` steps inside as root
with the image's environment (``RUN`` lines), and install the snapshot as a base, its provenance
(image digest and name, or the Debian suite and package versions) recorded as annotations.

The heavy imports (the image builder, the VMM drivers) happen when a command runs.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .output import Context, human_size
from .vmcmds import VMM_CHOICES, _positive_int, _reports_vmm_errors, _secs, add_net_option, print_snapshot

if TYPE_CHECKING:
    from ..hub.progress import Progress
    from ..images.build import BuiltRootfs
    from ..images.debian import DebianSpec
    from ..images.reference import ImageRef

DEFAULT_MEM_MIB = 512
_DEV_NOTE = re.compile(r"skipped (?:character|block) device /dev/(\S+) \(layer \d+\)$")
DEFAULT_SUITE = "bookworm"
_PHASE_LABELS = {
    "download": "download layers",
    "debootstrap": "mmdebstrap",
    "apply": "apply layers",
    "mkfs": "mkfs.ext4",
}


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    bake = argparse.ArgumentParser(add_help=False, parents=[common])
    bake.add_argument("--tag", required=True, metavar="T", help="local tag of the new base snapshot")
    bake.add_argument(
        "--size-mib",
        type=_positive_int,
        default=None,
        metavar="MIB",
        help="size of the root filesystem image (default: the tree plus headroom, docs/images.md)",
    )
    bake.add_argument(
        "--mem-mib", type=_positive_int, default=DEFAULT_MEM_MIB, metavar="MIB", help="guest RAM (default 512)"
    )
    bake.add_argument("--vcpus", type=_positive_int, default=1, metavar="N", help="guest vCPUs (default 1)")
    bake.add_argument(
        "--exec",
        dest="exec_cmd",
        action="append",
        metavar="CMD",
        help="shell command run inside before the snapshot, as root with the image's environment and working "
        "directory, like a Dockerfile RUN line (repeatable: in order; the first failure stops)",
    )
    bake.add_argument(
        "--exec-timeout", type=float, default=600.0, metavar="S", help="seconds each --exec step may run (default 600)"
    )
    add_net_option(bake, "the --exec steps", needs="")
    bake.add_argument("--force", action="store_true", help="replace an existing snapshot with this tag")
    bake.add_argument("--vmm", choices=VMM_CHOICES, default=None, help="driver (default: qemu)")
    bake.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    bake.add_argument("--json", action="store_true", help="print the result as JSON (sizes in bytes)")

    p = sub.add_parser(
        "from-image",
        parents=[bake],
        help="bake a base snapshot from an OCI image: its layers become the guest's root filesystem",
    )
    p.add_argument(
        "image",
        metavar="IMAGE",
        help="HOST[:PORT]/repo[:tag|@sha256:…] (any OCI registry, a forkd hub with your login), "
        "oci:DIR[:tag], or docker-archive:FILE",
    )
    p.set_defaults(func=run_from_image)

    p = sub.add_parser(
        "from-debian",
        parents=[bake],
        help="bake a base snapshot from Debian packages (mmdebstrap from the archive this host's apt uses)",
    )
    p.add_argument("--suite", default=DEFAULT_SUITE, metavar="SUITE", help=f"Debian suite (default {DEFAULT_SUITE})")
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PKG[,PKG…]",
        help="packages to install on top of the minimal system (repeatable, comma-separated; "
        "PKG=VERSION pins a version)",
    )
    p.add_argument(
        "--variant",
        default="minbase",
        metavar="V",
        help="mmdebstrap variant (default minbase: essential packages and apt)",
    )
    p.set_defaults(func=run_from_debian)


@_reports_vmm_errors
def run_from_image(args: argparse.Namespace, ctx: Context) -> int:
    from ..images.reference import parse_image_reference

    return _bake(args, ctx, parse_image_reference(args.image))


@_reports_vmm_errors
def run_from_debian(args: argparse.Namespace, ctx: Context) -> int:
    from ..images.debian import DebianSpec

    packages = [p.strip() for item in args.include for p in item.split(",") if p.strip()]
    return _bake(args, ctx, DebianSpec(args.suite, tuple(packages), variant=args.variant))


def _bake(args: argparse.Namespace, ctx: Context, source: ImageRef | DebianSpec) -> int:
    from ..hub.progress import FAILED, INTERRUPTED, make_progress
    from ..images.build import build_rootfs
    from ..vmops import GuestSteps, check_new_base, snapshot_rootfs

    with ctx.store() as store:
        check_new_base(store, args.tag, args.force)  # before minutes of building
    progress = make_progress(quiet=args.quiet or args.json, stream=ctx.stderr)
    started = time.monotonic()
    try:
        built = build_rootfs(source, size_mib=args.size_mib, progress=_ProgressAdapter(progress))
    except BaseException as e:
        progress.close(finished=False, stopped=INTERRUPTED if isinstance(e, KeyboardInterrupt) else FAILED)
        raise
    progress.close()
    build_ms = (time.monotonic() - started) * 1000
    for note in condense_notes(built.notes):
        ctx.warn(note)
    steps = GuestSteps.of(args.exec_cmd, args.exec_timeout, args.net)
    if steps.commands and not built.has_shell:
        raise UsageError(
            f"{built.source} has no POSIX shell at /bin/sh, so --exec cannot run in it "
            "(leave out --exec to snapshot it as it boots)"
        )
    if not args.json:
        how = "found in the cache" if built.cache_hit else f"built in {_secs(build_ms)}"
        ctx.print(f"Root filesystem of {built.source}: {human_size(built.size)}, {how} ({built.path})")
    with ctx.store() as store:
        result = snapshot_rootfs(
            store,
            args.tag,
            built.path,
            mem_mib=args.mem_mib,
            vcpus=args.vcpus,
            steps=steps,
            annotations=built.annotations,
            force=args.force,
            vmm=args.vmm,
        )
    result.timings_ms["rootfs_ms"] = build_ms
    if args.json:
        ctx.json({**result.to_obj(), "rootfs": _rootfs_obj(built)})
        return 0
    print_snapshot(ctx, result)
    return 0


def condense_notes(notes: list[str]) -> list[str]:
    """The builder's notes, with the device nodes under /dev (every Debian userland has them; the guest's
    devtmpfs provides /dev at boot) said in one line instead of one each."""
    devices = [n for n in notes if _DEV_NOTE.match(n)]
    if len(devices) < 2:
        return notes
    names = ", ".join(m.group(1) for n in devices if (m := _DEV_NOTE.match(n)))
    rest = [n for n in notes if not _DEV_NOTE.match(n)]
    return [f"skipped {len(devices)} device nodes under /dev ({names}): the guest's devtmpfs provides them", *rest]


def _rootfs_obj(built: BuiltRootfs) -> dict[str, Any]:
    return {
        "source": built.source,
        "path": str(built.path),
        "size": built.size,
        "cache_hit": built.cache_hit,
        "key": built.key,
        "annotations": dict(built.annotations),
        "env": list(built.env),
        "workdir": built.workdir,
        "has_shell": built.has_shell,
        "packages": dict(built.packages),
        "notes": list(built.notes),
    }


class _ProgressAdapter:
    """The builder's ``progress(phase, done, total)`` calls as the transfer progress bars."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._phase: str | None = None
        self._done = 0
        self._total: int | None = None

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if phase != self._phase or (total is not None and self._total is None):
            self._phase, self._done, self._total = phase, 0, total
            label = _PHASE_LABELS.get(phase, phase)
            if total is None:
                self._progress.busy(label)  # mmdebstrap says nothing of how far it is
            else:
                self._progress.task(label, total)
        if self._total is not None and done > self._done:
            self._progress.advance(done - self._done)
            self._done = done
