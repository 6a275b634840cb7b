"""The VMM verbs: ``snapshot``, ``snapshot-diff`` and ``fork`` (see docs/cli.md).

The work happens in :mod:`forkd_client.vmops`, imported on first use so that commands which
never start a VM do not pay for importing the drivers. ``vmm`` errors are not ClientErrors;
:func:`_reports_vmm_errors` prints them like every other error (``forkd: error: …``, exit 1).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..units import plural
from .output import Context, human_size

if TYPE_CHECKING:
    from vmm import ExecResult

    from ..vmops import Forked, SnapshotResult

VMM_CHOICES = ("qemu", "qemu-microvm", "firecracker")
_NEEDS_NIC = "; needs a snapshot baked from an image (from-image, from-debian)"
Command = Callable[[argparse.Namespace, Context], int]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _reports_vmm_errors(func: Command) -> Command:
    @functools.wraps(func)
    def wrapper(args: argparse.Namespace, ctx: Context) -> int:
        from vmm import VmmError

        try:
            return func(args, ctx)
        except VmmError as e:
            ctx.error(str(e))
            return 1

    return wrapper


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    vm_common = argparse.ArgumentParser(add_help=False, parents=[common])
    vm_common.add_argument(
        "--exec-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds the --exec command may run (default 600)",
    )
    vm_common.add_argument(
        "--vmm",
        choices=VMM_CHOICES,
        default=None,
        help="driver (default: qemu for snapshot, the snapshot's own VMM otherwise)",
    )
    vm_common.add_argument("--json", action="store_true", help="print the result as JSON")

    p = sub.add_parser(
        "snapshot", parents=[vm_common], help="boot the guest, optionally run a command, save it as a base snapshot"
    )
    p.add_argument("--tag", required=True, metavar="T")
    p.add_argument("--mem-mib", type=_positive_int, default=256, metavar="MIB", help="guest RAM (default 256)")
    p.add_argument("--vcpus", type=_positive_int, default=1, metavar="N", help="guest vCPUs (default 1)")
    p.add_argument(
        "--guest",
        default="DEFAULT",
        metavar="DEFAULT|PATH",
        help="guest image: the cached default guest, or a directory built by `python -m vmm.guest build`",
    )
    p.add_argument(
        "--exec",
        dest="exec_cmd",
        action="append",
        metavar="CMD",
        help="shell command to run in the guest first (repeatable: run in order, the first failure stops)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing snapshot with this tag")
    p.set_defaults(func=run_snapshot)

    p = sub.add_parser(
        "snapshot-diff",
        parents=[vm_common],
        help="restore a snapshot, run a command, save the result as a chain link on it",
    )
    p.add_argument("--from", dest="parent", required=True, metavar="P", help="parent snapshot")
    p.add_argument("--tag", required=True, metavar="T")
    p.add_argument(
        "--exec",
        dest="exec_cmd",
        required=True,
        action="append",
        metavar="CMD",
        help="shell command to run in the guest (repeatable: run in order, the first failure stops); in a "
        "snapshot baked from an image it runs as root with the image's environment and working directory",
    )
    add_net_option(p, "the --exec commands")
    p.set_defaults(func=run_snapshot_diff)

    p = sub.add_parser(
        "fork",
        parents=[vm_common],
        help="start N copy-on-write children of a snapshot (verified chain, compat checked)",
    )
    p.add_argument("tag", metavar="TAG", help="local snapshot tag; with --lazy, a hub REF (NS/REPO[:TAG|@DIGEST])")
    p.add_argument("-n", dest="count", type=_positive_int, default=1, metavar="N", help="children (default 1)")
    p.add_argument("--exec", dest="exec_cmd", metavar="CMD", help="shell command to run in every child")
    p.add_argument("--keep", action="store_true", help="leave the children running; print their pids and work dirs")
    add_net_option(p, "the children")
    p.add_argument(
        "--lazy",
        action="store_true",
        help="fork from a hub chain before it is downloaded: memory pages and disk blocks are fetched (and "
        "verified) as the children touch them, the rest afterwards, then the chain is installed as `forkd pull` "
        "installs it "
        "(docs/lazy-fork.md; with --exec, or --keep: then a detached process serves them until they exit)",
    )
    p.add_argument("--as", dest="as_tag", metavar="LOCAL_TAG", help="with --lazy: local tag to install the head as")
    p.add_argument(
        "--save-profile",
        action="store_true",
        help="with --lazy: attach the order in which the children first read memory (and disk) chunks to the "
        "head layer on the hub (an access-profile referrer; needs push access), so later lazy forks fetch those "
        "chunks first",
    )
    p.set_defaults(func=run_fork)


def add_net_option(parser: argparse.ArgumentParser, who: str, needs: str = _NEEDS_NIC) -> None:
    """``--net``: the guest's NIC reaches out (snapshots baked from a root filesystem image have one)."""
    parser.add_argument(
        "--net",
        action="store_true",
        help=f"give {who} outbound network through the VMM's user-mode NAT (the host's own loopback services "
        f"answer at 10.0.2.2){needs}; default: no network",
    )


@_reports_vmm_errors
def run_snapshot(args: argparse.Namespace, ctx: Context) -> int:
    from ..vmops import snapshot_base

    with ctx.store() as store:
        result = snapshot_base(
            store,
            args.tag,
            mem_mib=args.mem_mib,
            vcpus=args.vcpus,
            guest=args.guest,
            exec_cmd=args.exec_cmd,
            exec_timeout=args.exec_timeout,
            force=args.force,
            vmm=args.vmm,
        )
    if args.json:
        ctx.json(result.to_obj())
        return 0
    print_snapshot(ctx, result)
    return 0


def print_snapshot(ctx: Context, result: SnapshotResult) -> None:
    """What a new base snapshot says: the --exec output, then timings, compat and size."""
    _print_exec_output(ctx, result.exec_result)
    t = result.timings_ms
    snap = result.snapshot
    ctx.print(
        f"Snapshot {snap.tag}: booted in {_secs(t['boot_ms'])}{_exec_part(t)}, "
        f"saved in {_secs(t['snapshot_ms'] + t['install_ms'])}"
    )
    ctx.print(f"  {_compat_line(snap.compat)}; {human_size(snap.logical_size)} ({human_size(snap.disk_size)} on disk)")


@_reports_vmm_errors
def run_snapshot_diff(args: argparse.Namespace, ctx: Context) -> int:
    from ..vmops import snapshot_diff

    with ctx.store() as store:
        result = snapshot_diff(
            store,
            args.parent,
            args.tag,
            args.exec_cmd,
            exec_timeout=args.exec_timeout,
            vmm=args.vmm,
            network=args.net,
        )
    if args.json:
        ctx.json(result.to_obj())
        return 0
    _print_exec_output(ctx, result.exec_result)
    t, diff = result.timings_ms, result.diff
    assert diff is not None
    ctx.print(
        f"Snapshot {args.tag} on {args.parent}: restored in {_secs(t['clone_ms'] + t['restore_ms'])}"
        f"{_exec_part(t)}, saved in {_secs(t['snapshot_ms'] + t['install_ms'])}"
    )
    share = 100.0 * diff.changed_chunks / diff.total_chunks if diff.total_chunks else 0.0
    ctx.print(
        f"  layer: {diff.changed_chunks} of {diff.total_chunks} {human_size(diff.chunk_size)} chunks "
        f"changed vs {args.parent} ({share:.1f}%, {human_size(diff.layer_bytes)} of data to push)"
    )
    return 0


@_reports_vmm_errors
def run_fork(args: argparse.Namespace, ctx: Context) -> int:
    from ..vmops import fork

    if args.lazy or args.as_tag or args.save_profile:
        from .lazycmds import run_lazy_fork

        return run_lazy_fork(args, ctx, _print_fork)
    with ctx.store() as store:
        forked = fork(store, args.tag, args.count, vmm=args.vmm, network=args.net)
    try:
        if args.exec_cmd is not None:
            forked.run(args.exec_cmd, args.exec_timeout)
        forked.measure()
        if args.keep:
            forked.detach()
    finally:
        if not forked.kept:
            forked.kill()
    if args.json:
        ctx.json(forked.to_obj())
    else:
        _print_fork(ctx, forked, args.exec_cmd is not None)
    return 1 if forked.failed else 0


def _print_fork(ctx: Context, forked: Forked, ran: bool) -> None:
    ctx.print(
        f"Verified {forked.tag} (chain depth {len(forked.chain)}) in {forked.verify_ms:.1f} ms; "
        f"forked {plural(len(forked.children), 'child', 'children')} in {_secs(forked.spawn_ms)}"
    )
    rows = []
    for c in forked.children:
        m = c.memory
        rows.append(
            [
                str(c.index),
                str(c.vm.pid),
                f"{c.ready_ms:.0f} ms",
                "-" if c.exec_ms is None else f"{c.exec_ms:.0f} ms",
                "error" if c.error else ("-" if c.result is None else str(c.result.exit_code)),
                "-" if m is None else human_size(m.pss),
                "-" if m is None else human_size(m.guest_ram_private_dirty),
            ]
        )
    ctx.table(
        ["CHILD", "PID", "READY", "EXEC", "EXIT", "PSS", "GUEST DIRTY"],
        rows,
        right=["READY", "EXEC", "PSS", "GUEST DIRTY"],
    )
    if ran:
        for c in forked.children:
            status = f"error: {c.error}" if c.error else f"exit {c.result.exit_code}"  # type: ignore[union-attr]  # typing debt, decisions/0008
            ctx.print(f"--- child {c.index} (pid {c.vm.pid}): {status}")
            if c.result is not None and c.result.output:
                ctx.stdout.write(c.result.output if c.result.output.endswith("\n") else c.result.output + "\n")
    if forked.kept:
        ctx.print(f"Kept {plural(len(forked.children), 'child', 'children')} running (stop them with kill PID):")
        for c in forked.children:
            ctx.print(f"  pid {c.vm.pid}  work dir {c.vm.work_dir}")
    else:
        ctx.print(f"Stopped {plural(len(forked.children), 'child', 'children')}")
    if forked.failed:
        ctx.error(f"the command failed in {len(forked.failed)} of {plural(len(forked.children), 'child', 'children')}")


def _print_exec_output(ctx: Context, result: ExecResult | None) -> None:
    if result is not None and result.output:
        ctx.stdout.write(result.output if result.output.endswith("\n") else result.output + "\n")


def _exec_part(timings: dict[str, float]) -> str:
    return f", --exec ran in {_secs(timings['exec_ms'])}" if "exec_ms" in timings else ""


def _compat_line(compat: dict[str, Any]) -> str:
    keys = ("vmm", "vmmVersion", "accel", "cpu", "memMiB", "vcpus")
    return " ".join(f"{k}={compat[k]}" for k in keys if k in compat)


def _secs(ms: float) -> str:
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"
