#!/usr/bin/env python3
"""Start-up time of ``forkd`` commands, against the interpreter alone and against loading the hub client eagerly.

Usage: python bench/cli_startup.py [--repeat 20] [--tree DIR] [--pull] [--compiled]

Each command runs in a fresh interpreter (``python -c`` calling ``forkd_client.cli.main.run``,
what the console script does) in an empty directory (``python -c`` puts the current
directory first on sys.path), with an empty FORKD_HOME, --repeat times; the table gives the
median wall time. Peers in the same run: ``python -c pass`` (the interpreter's own start-up)
and ``forkd --help`` with ``forkd_client.cli.hub`` (httpx, cryptography, push and pull)
imported first, which is what every command paid before the hub commands' handlers were loaded
lazily (issue 15). ``--tree DIR`` also times ``forkd --help`` from another source tree (e.g. a
checkout of the commit before the change) as a second peer.

``--pull`` adds a whole ``forkd pull`` (spawn to exit): a tiny 3-link chain (16 MiB memory.bin,
half data, two links each rewriting 3%; 7 MiB on the wire) pushed to a local ``forkd-hub serve``
on its filesystem store, pulled into an empty store with ``--as head -q``, from this tree and
(with ``--tree``) from the other one, alternately; and the start-up of the fresh raw peer of
bench/s3_pull.py (``python -c "import boto3; boto3.client('s3', ...)"``, no request). A pull of
so small a chain is mostly fixed costs: start-up, the hub's round trips, installing, exiting.

``--compiled``: run every command from copies of the trees with their bytecode compiled first
(``python -m compileall``), as an installed package has it. Without it a tree on PYTHONPATH
under PYTHONDONTWRITEBYTECODE=1 (this machine's environment) is compiled from source at every
start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, ROOT, MiB, compile_tree, median, print_table  # noqa: E402

#: what the console script runs: ``run()`` (the quick exit), or ``main()`` in a tree from before it
CONSOLE = "import sys, forkd_client.cli.main as m; m.run() if hasattr(m, 'run') else sys.exit(m.main())"
EAGER = "import sys; import forkd_client.cli.hub; from forkd_client.cli.main import main; sys.exit(main())"


def timed_command(code: str, argv: list[str], env: dict[str, str], repeat: int, cwd: str) -> list[float]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.DEVNULL, check=False, cwd=cwd)
        times.append(time.perf_counter() - t)
    return times


#: what bench/s3_pull.py's fresh raw process does before its first GET (no request here)
BOTO3_CLIENT = (
    "import boto3; from botocore.config import Config; "
    "boto3.client('s3', endpoint_url='http://127.0.0.1:9', region_name='us-east-1', aws_access_key_id='x', "
    "aws_secret_access_key='x', config=Config(retries={'mode': 'standard', 'max_attempts': 2}))"
)
BOTO3_ROW = "python -c 'import boto3; boto3.client(s3)' (raw peer)"
CLIENT_PACKAGES = ("forkd_client", "manifest", "vmm", "clikit")


def compiled_copy(tree: Path, dest: Path) -> Path:
    """The client's packages of ``tree`` copied to ``dest`` with their bytecode compiled."""
    for package in CLIENT_PACKAGES:
        shutil.copytree(tree / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))
    compile_tree(dest, CLIENT_PACKAGES)
    return dest


def pull_times(trees: list[Path], env: dict[str, str], repeat: int, tmp: Path) -> list[list[float]]:
    """Spawn-to-exit times of ``forkd pull`` of a tiny 3-link chain from a local hub, one list per
    tree, the trees taking turns within each round."""
    from chain_pull_vs_skopeo import import_chain, make_chain
    from procs import ForkdUser, HubServer

    root = tmp / "pull"
    root.mkdir()
    chain = make_chain(root, 16 * MiB, 0.5, 0.03, 0)
    times: list[list[float]] = [[] for _ in trees]
    with HubServer(root / "hub-data", root / "hub.log") as hub:
        pusher = ForkdUser(root / "pusher", hub.url, hub.token("bench", "push:acme/*"))
        import_chain(pusher, chain)
        pusher.run("push", "link2", "acme/chain:v1", "--public")
        for i in range(repeat):
            for tree, runs in zip(trees, times, strict=True):
                home = root / f"puller{i}"
                puller = {**env, "PYTHONPATH": str(tree), "FORKD_HOME": str(home), "FORKD_HUB_URL": hub.url}
                puller["XDG_CONFIG_HOME"] = str(home / "cfg")
                puller.pop("FORKD_TOKEN", None)
                t = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-c", CONSOLE, "pull", "acme/chain:v1", "--as", "head", "-q"],
                    env=puller,
                    stdout=subprocess.DEVNULL,
                    check=True,
                    cwd=tmp,
                    timeout=300,
                )
                runs.append(time.perf_counter() - t)
                shutil.rmtree(home)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--tree", type=Path, default=None, help="another source tree to time forkd --help from")
    ap.add_argument("--pull", action="store_true", help="also time forkd pull of a tiny chain, and boto3's start-up")
    ap.add_argument("--compiled", action="store_true", help="run from copies of the trees with compiled bytecode")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        this, other = ROOT, args.tree.resolve() if args.tree is not None else None
        if args.compiled:
            this = compiled_copy(ROOT, Path(tmp) / "this")
            other = compiled_copy(other, Path(tmp) / "other") if other is not None else None
        env = {**os.environ, "FORKD_HOME": str(Path(tmp) / "home"), "XDG_CONFIG_HOME": str(Path(tmp) / "cfg")}
        env["PYTHONPATH"] = str(this)
        cases = [
            ("python -c pass (interpreter only)", "pass", []),
            ("forkd --help, hub client imported eagerly (before)", EAGER, ["--help"]),
            ("forkd --help", CONSOLE, ["--help"]),
            ("forkd fork --help", CONSOLE, ["fork", "--help"]),
            ("forkd images (empty store)", CONSOLE, ["images"]),
            ("forkd push --help", CONSOLE, ["push", "--help"]),
        ]
        results = [(name, median(timed_command(code, argv, env, args.repeat, tmp))) for name, code, argv in cases]
        if other is not None:
            other_env = {**env, "PYTHONPATH": str(other)}
            results.insert(
                2,
                (
                    f"forkd --help from {args.tree}",
                    median(timed_command(CONSOLE, ["--help"], other_env, args.repeat, tmp)),
                ),
            )
        if args.pull:
            results.append(
                (
                    BOTO3_ROW,
                    median(timed_command(BOTO3_CLIENT, [], env, args.repeat, tmp)),
                )
            )
            trees = [this] + ([other] if other is not None else [])
            names = ["forkd pull (3-link 16 MiB chain, local hub)"] + (
                [f"  the same from {args.tree}"] if other else []
            )
            for name, runs in zip(names, pull_times(trees, env, args.repeat, Path(tmp)), strict=True):
                results.append((name, median(runs)))
    eager = results[1][1]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    compiled = "; bytecode compiled first" if args.compiled else ""
    print(f"cli_startup: median of {args.repeat} fresh interpreters{compiled}; load average {load}; {MACHINE_NOTE}")
    print_table(
        ["command", "ms", "vs eager hub import"],
        [[name, f"{seconds * 1000:.0f}", f"{seconds / eager:.2f}x"] for name, seconds in results],
    )
    if args.pull:
        times = dict(results)
        interpreter, boto = times["python -c pass (interpreter only)"], times[BOTO3_ROW]
        for name, seconds in results:
            if "forkd pull" in name or name.startswith("  the same"):
                print(
                    f"{name.strip()}: {(seconds - interpreter) * 1000:.0f} ms over the interpreter, "
                    f"{seconds / boto:.2f}x the boto3 client's start-up"
                )


if __name__ == "__main__":
    main()
