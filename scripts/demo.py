#!/usr/bin/env python3
"""The README's main job, end to end, through the real CLIs (see scripts/demo.sh)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1 << 20
GUEST_MIB = 512
SUITE = "bookworm"
#: numpy wheels for the guest's Python (Debian 12: CPython 3.11, glibc 2.36), fetched once by the host's pip
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def wheel_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forkd" / "demo-wheels"


class WheelIndex:
    """numpy's wheel served on the host's loopback: the guest reaches it through its NAT as 10.0.2.2."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.port), "--directory", str(directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def wheel_index(work: Path) -> WheelIndex:
    wheels = wheel_cache()
    if not list(wheels.glob("numpy-*.whl")):
        print("$ pip download numpy (the guest's wheel, once)", flush=True)
        platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
             "--no-deps", "--python-version", "3.11", "--implementation", "cp", *platforms, "-d", str(wheels), "numpy"],
            check=True,
        )  # fmt: skip
    return WheelIndex(wheels)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Demo:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.env = {
            **os.environ,
            "FORKD_HOME": str(work / "home"),
            "XDG_CONFIG_HOME": str(work / "config"),
            "FORKD_HUB_DATA_DIR": str(work / "hub"),
        }
        self.steps: list[tuple[str, float]] = []

    def run(self, label: str, *argv: str, json_out: bool = False, stdin: str | None = None) -> object:
        print(f"$ {' '.join(argv)}", flush=True)
        start = time.perf_counter()
        result = subprocess.run(argv, env=self.env, input=stdin, capture_output=True, text=True, timeout=900)
        seconds = time.perf_counter() - start
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            raise SystemExit(f"demo step failed: {label} (exit {result.returncode})")
        self.steps.append((label, seconds))
        if json_out:
            return json.loads(result.stdout)
        for line in result.stdout.strip().splitlines()[:6]:
            print(f"  {line}")
        return result.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keep-workdir", action="store_true", help="leave the demo's files (hub data, store) behind")
    args = ap.parse_args()
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="forkd-demo-"))
    demo = Demo(work)
    port = free_port()
    hub_url = f"http://127.0.0.1:{port}"
    log = (work / "hub.log").open("w")
    hub = subprocess.Popen(
        ["forkd-hub", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=demo.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or hub.poll() is not None:
                    raise SystemExit("the hub did not start; see " + str(work / "hub.log")) from None
                time.sleep(0.1)
        print(f"hub: {hub_url} (SQLite + filesystem under {work / 'hub'})")
        token = str(demo.run("token", "forkd-hub", "token", "create", "demo", "--scope", "push:demo/*")).strip()
        demo.run("login", "forkd", "login", hub_url, "--token-stdin", stdin=token + "\n")
        demo.run(
            "bake base",
            "forkd",
            "from-debian",
            "--suite",
            SUITE,
            "--include",
            "python3,python3-pip",
            "--tag",
            "py-base",
            "--mem-mib",
            str(GUEST_MIB),
            "--exec",
            "python3 --version",
        )
        index = wheel_index(work)
        try:
            demo.run(
                "link: numpy",
                "forkd",
                "snapshot-diff",
                "--from",
                "py-base",
                "--tag",
                "py-numpy",
                "--net",
                "--exec",
                # --no-compile, then one import: only the modules numpy imports are byte-compiled (what the
                # children import), not its ~1,000 (tests included): half the link's time under TCG
                # (docs/benchmarks-history.md, "Real environments")
                "pip install --break-system-packages --no-index --no-compile --disable-pip-version-check "
                f"--trusted-host 10.0.2.2 --find-links http://10.0.2.2:{index.port}/ numpy",
                "--exec",
                "python3 -c 'import numpy'",
            )
        finally:
            index.stop()
        images = demo.run("images", "forkd", "images", "--json", json_out=True)
        logical = sum(i["logical_size"] for i in images)  # type: ignore[union-attr]
        pushed = demo.run("push", "forkd", "push", "py-numpy", "demo/python:numpy", "--json", json_out=True)
        demo.run("remove local", "forkd", "rmi", "py-base", "--cascade")
        pulled = demo.run("pull", "forkd", "pull", "demo/python:numpy", "--as", "py-numpy", "--json", json_out=True)
        demo.run("verify", "forkd", "inspect", "py-numpy", "--verify")
        forked = demo.run(
            "fork 5",
            "forkd",
            "fork",
            "py-numpy",
            "-n",
            "5",
            "--json",
            "--exec",
            "python3 -c 'import numpy; print(numpy.random.default_rng().integers(1<<62))'",
            json_out=True,
        )
    finally:
        hub.send_signal(signal.SIGTERM)
        try:
            hub.wait(timeout=30)
        except subprocess.TimeoutExpired:
            hub.kill()
        log.close()

    sent, received = pushed["bytes_sent"], pulled["bytes_received"]  # type: ignore[index]
    print("\n=== summary ===")
    print(
        f"chain: py-base (Debian {SUITE}, python3 + pip) -> py-numpy (pip install numpy), {GUEST_MIB} MiB guests, "
        f"{logical / MiB:.0f} MiB of snapshot files (memory + root filesystem)"
    )
    print(
        f"pushed {sent / MiB:.1f} MiB, pulled {received / MiB:.1f} MiB: "
        f"{logical / max(sent, 1):.1f}x less than the files (zero pages, 64 KiB dedup, zstd)"
    )
    for link in pushed["links"]:  # type: ignore[index]
        print(
            f"  layer {link['tag']:<10} {link['bytes_uploaded'] / MiB:7.2f} MiB uploaded, "
            f"{link['new_chunks']} new chunks, {link['reused_chunks']} reused"
        )
    print("steps:")
    for label, seconds in demo.steps:
        print(f"  {label:<14} {seconds:6.2f} s")
    print(f"  {'total':<14} {time.perf_counter() - started:6.2f} s")
    children = forked["children"]  # type: ignore[index]
    outputs = {c["output"].strip() for c in children}
    print(
        f"fork: {len(children)} children, chain verified in {forked['verify_ms']:.1f} ms, "  # type: ignore[index]
        f"forked in {forked['spawn_ms'] / 1000:.2f} s, {len(outputs)} distinct numpy random numbers"  # type: ignore[index]
    )
    for c in children:
        m = c["memory"]
        print(
            f"  child {c['index']}: ready {c['ready_ms']:.0f} ms, numpy says {c['output'].strip()}, "
            f"PSS {m['pss'] / MiB:.1f} MiB, guest RAM private {m['guest_ram_private_dirty'] / MiB:.1f} MiB "
            f"({100 * m['guest_ram_private_dirty'] / (GUEST_MIB * MiB):.1f}% of guest RAM)"
        )
    ok = (
        forked["failed"] == 0  # type: ignore[index]
        and len(outputs) == len(children)
        and all(o.isdigit() for o in outputs)
    )
    if args.keep_workdir:
        print(f"files kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("demo: OK" if ok else "demo: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
