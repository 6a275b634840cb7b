#!/usr/bin/env python3
"""Start-up time of ``forkd`` commands, against the interpreter alone and against loading the hub client eagerly.

Usage: python bench/cli_startup.py [--repeat 20] [--tree DIR]

Each command runs in a fresh interpreter (``python -c`` calling ``forkd_client.cli.main.main``,
what the console script does) in an empty directory (``python -c`` puts the current
directory first on sys.path), with an empty FORKD_HOME, --repeat times; the table gives the
median wall time. Peers in the same run: ``python -c pass`` (the interpreter's own start-up)
and ``forkd --help`` with ``forkd_client.cli.hub`` (httpx, cryptography, push and pull)
imported first, which is what every command paid before the hub commands' handlers were loaded
lazily (issue 15). ``--tree DIR`` also times ``forkd --help`` from another source tree (e.g. a
checkout of the commit before the change) as a second peer.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MACHINE_NOTE, ROOT, median, print_table  # noqa: E402

CONSOLE = "import sys; from forkd_client.cli.main import main; sys.exit(main())"
EAGER = "import sys; import forkd_client.cli.hub; from forkd_client.cli.main import main; sys.exit(main())"


def timed_command(code: str, argv: list[str], env: dict[str, str], repeat: int, cwd: str) -> list[float]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, *argv], env=env, stdout=subprocess.DEVNULL, check=False, cwd=cwd)
        times.append(time.perf_counter() - t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--tree", type=Path, default=None, help="another source tree to time forkd --help from")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        env = {**os.environ, "FORKD_HOME": str(Path(tmp) / "home"), "XDG_CONFIG_HOME": str(Path(tmp) / "cfg")}
        env["PYTHONPATH"] = str(ROOT)
        cases = [
            ("python -c pass (interpreter only)", "pass", []),
            ("forkd --help, hub client imported eagerly (before)", EAGER, ["--help"]),
            ("forkd --help", CONSOLE, ["--help"]),
            ("forkd fork --help", CONSOLE, ["fork", "--help"]),
            ("forkd images (empty store)", CONSOLE, ["images"]),
            ("forkd push --help", CONSOLE, ["push", "--help"]),
        ]
        results = [(name, median(timed_command(code, argv, env, args.repeat, tmp))) for name, code, argv in cases]
        if args.tree is not None:
            other = {**env, "PYTHONPATH": str(args.tree.resolve())}
            results.insert(
                2,
                (f"forkd --help from {args.tree}", median(timed_command(CONSOLE, ["--help"], other, args.repeat, tmp))),
            )
    eager = results[1][1]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"cli_startup: median of {args.repeat} fresh interpreters; load average {load}; {MACHINE_NOTE}")
    print_table(
        ["command", "ms", "vs eager hub import"],
        [[name, f"{seconds * 1000:.0f}", f"{seconds / eager:.2f}x"] for name, seconds in results],
    )


if __name__ == "__main__":
    main()
