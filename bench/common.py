"""Shared pieces of the hub benchmarks: server processes, a byte-counting proxy, memory images, timing.

Everything runs on loopback and is cleaned up by the caller's ``ExitStack``/``with`` blocks:

* :class:`HubServer` runs ``forkd-hub serve --port P --data-dir D`` on a free port;
  :class:`RegistryServer` runs Debian's ``/usr/bin/docker-registry serve config.yml`` (its
  default config minus htpasswd auth, filesystem storage in a temp dir, bound to 127.0.0.1).
* :class:`CountingProxy` is a plain TCP relay that counts the bytes each way; pointing a client
  at it gives the bytes really on the wire (HTTP headers included) for any client, skopeo too.
  It is used in separate, untimed runs so its cost never enters a timing.
* :func:`make_memory_image` writes a sparse guest-memory-like image: random 4 MiB blocks hold
  data (alternately random bytes and text-like bytes), the rest are holes.
  :func:`make_child_image` copies it sparsely and dirties a fraction of it in page-aligned runs.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PAGE = 4 * KiB
BLOCK = 4 * MiB
MACHINE_NOTE = "2 cores, 24 GiB, Debian 12; shared and noisy: read ratios, not absolutes"
SKOPEO_BLOB_CACHE = Path("/var/lib/containers/cache/blob-info-cache-v1.boltdb")


# -- timing and printing ------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def timed_runs(fn: Callable[[int], object], repeat: int, before: Callable[[int], object] | None = None) -> list[float]:
    """Run ``before(i)`` untimed, then time ``fn(i)``, ``repeat`` times; the list of seconds."""
    times = []
    for i in range(repeat):
        if before is not None:
            before(i)
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return times


def mib_s(nbytes: int, seconds: float) -> float:
    return nbytes / MiB / seconds if seconds > 0 else float("inf")


def fmt_runs(times: Sequence[float]) -> str:
    return "/".join(f"{t:.2f}" for t in times)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str | None = None) -> None:
    """A plain aligned table (first column left, the others right), pasteable into markdown as code."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if title:
        print(title)
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print()


def human(nbytes: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes:.0f} B"


# -- processes ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _script(name: str) -> str | None:
    """The console script installed next to this interpreter (what a venv or pipx user runs),
    not a version manager's shim found first on PATH (pyenv's costs ~0.1 s of bash per call)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


def forkd_cmd(*args: str) -> list[str]:
    exe = _script("forkd")
    return [exe, *args] if exe else [sys.executable, "-m", "forkd_client.cli.main", *args]


def forkd_hub_cmd(*args: str) -> list[str]:
    exe = _script("forkd-hub")
    return [exe, *args] if exe else [sys.executable, "-m", "hub_server.cli", *args]


def wait_http(url: str, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited early with status {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer {url} within {timeout:.0f} s")


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class HubServer:
    """``forkd-hub serve`` on a free loopback port with its own data dir; ``stop()`` ends it."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(forkd_hub_cmd("serve", "--port", str(self.port), "--data-dir", str(data_dir)),
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            wait_http(self.url + "/healthz", self.proc, "forkd-hub serve")
        except BaseException:
            self.stop()
            raise

    def token(self, name: str, *scopes: str) -> str:
        args = ["token", "create", name, "--data-dir", str(self.data_dir)]
        for scope in scopes:
            args += ["--scope", scope]
        return subprocess.run(forkd_hub_cmd(*args), check=True, capture_output=True, text=True,
                              timeout=60).stdout.strip()

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()

    def __enter__(self) -> "HubServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


REGISTRY_CONFIG = """\
version: 0.1
log:
  fields:
    service: registry
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  secret: forkd-hub-bench
  headers:
    X-Content-Type-Options: [nosniff]
health:
  storagedriver:
    enabled: true
    interval: 10s
    threshold: 3
"""


class RegistryServer:
    """Debian's docker-registry (distribution 2.8): /etc/docker/registry/config.yml without the
    htpasswd auth (plus an http secret, to silence its start-up warning), storage under ``root``,
    on a free loopback port. ``host`` is ``127.0.0.1:P``."""

    def __init__(self, root: Path, log_path: Path) -> None:
        exe = shutil.which("docker-registry") or "/usr/bin/docker-registry"
        if not os.path.exists(exe):
            raise RuntimeError("docker-registry is not installed: run scripts/install-bench-deps.sh")
        self.root = root
        self.storage = root / "storage"
        self.storage.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        config = root / "config.yml"
        config.write_text(REGISTRY_CONFIG.format(root=self.storage, port=self.port))
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen([exe, "serve", str(config)], stdout=self._log, stderr=subprocess.STDOUT)
        try:
            wait_http(self.url + "/v2/", self.proc, "docker-registry")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()

    def __enter__(self) -> "RegistryServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ForkdUser:
    """One machine's ``forkd``: its own store (FORKD_HOME) and config dir, pointed at a hub URL."""

    def __init__(self, root: Path, hub_url: str, token: str | None = None, home: Path | None = None) -> None:
        self.root = root
        self.home = home or root / "home"
        self.env = {**os.environ, "FORKD_HOME": str(self.home), "XDG_CONFIG_HOME": str(root / "cfg"),
                    "FORKD_HUB_URL": hub_url}
        self.env.pop("FORKD_TOKEN", None)
        if token:
            self.run("login", hub_url, "--token-stdin", input=token + "\n")

    def run(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> str:
        result = subprocess.run(forkd_cmd(*args), env={**self.env, **(env or {})}, capture_output=True, text=True,
                                input=input, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"forkd {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def json(self, *args: str, env: dict[str, str] | None = None) -> dict:
        return json.loads(self.run(*args, "--json", env=env))


# -- skopeo -------------------------------------------------------------------------------------


def skopeo_clear_cache() -> None:
    """skopeo remembers blobs it saw per registry; a fresh transfer must not use that knowledge."""
    SKOPEO_BLOB_CACHE.unlink(missing_ok=True)


def skopeo_copy(src: str, dst: str) -> None:
    """``skopeo copy`` keeping uncompressed layers as they are (baselines.md §1); plain HTTP to registries."""
    cmd = ["skopeo", "copy", "--quiet", "--preserve-digests"]
    cmd += ["--src-tls-verify=false"] if src.startswith("docker://") else []
    cmd += ["--dest-tls-verify=false"] if dst.startswith("docker://") else ["--dest-oci-accept-uncompressed-layers"]
    result = subprocess.run([*cmd, src, dst], capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} {src} {dst} failed: {result.stderr.strip()}")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 * MiB):
            h.update(block)
    return h.hexdigest()


def write_oci_layout(layout: Path, tag: str, layer_files: Sequence[Path], annotations: dict[str, str] | None = None,
                     digests: dict[Path, str] | None = None) -> dict[Path, str]:
    """An OCI image layout holding one image whose layers are ``layer_files`` as they are
    (uncompressed, media type ``…layer.v1.tar`` as in baselines.md §1), blobs hard-linked (or
    copied across filesystems). Returns the sha256 of every layer file (reusing ``digests``)."""
    digests = dict(digests or {})
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    layers = []
    for f in layer_files:
        d = digests.get(f) or sha256_file(f)
        digests[f] = d
        target = blobs / d
        if not target.exists():
            try:
                os.link(f, target)
            except OSError:
                shutil.copyfile(f, target)
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{d}",
                       "size": f.stat().st_size})
    diff_ids = [layer["digest"] for layer in layers]
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}, "config": {}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": _write_blob(blobs, config, "application/vnd.oci.image.config.v1+json"),
                           "layers": layers, **({"annotations": annotations} if annotations else {})}).encode()
    mdesc = _write_blob(blobs, manifest, "application/vnd.oci.image.manifest.v1+json")
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2, "manifests": []}
    index["manifests"] = [m for m in index["manifests"]
                          if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag]
    index["manifests"].append({**mdesc, "annotations": {"org.opencontainers.image.ref.name": tag}})
    index_path.write_text(json.dumps(index))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return digests


def _write_blob(blobs: Path, data: bytes, media_type: str) -> dict:
    d = hashlib.sha256(data).hexdigest()
    (blobs / d).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{d}", "size": len(data)}


# -- counting proxy -----------------------------------------------------------------------------


class CountingProxy:
    """A TCP relay 127.0.0.1:port → target that counts payload bytes each way (headers included)."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.host = f"127.0.0.1:{self.port}"
        self.up = 0  # client → server
        self.down = 0  # server → client
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closing = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def reset(self) -> tuple[int, int]:
        """Wait for open connections to finish, return (up, down) since the last reset, zero them."""
        self.settle()
        with self._lock:
            counts, self.up, self.down = (self.up, self.down), 0, 0
        return counts

    def settle(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        for t in list(self._threads):
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for src, dst, up in ((client, server, True), (server, client, False)):
                t = threading.Thread(target=self._pump, args=(src, dst, up), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        buf = memoryview(bytearray(1 * MiB))
        try:
            while True:
                n = src.recv_into(buf)
                if n == 0:
                    break
                dst.sendall(buf[:n])
                with self._lock:
                    if up:
                        self.up += n
                    else:
                        self.down += n
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            if not up:  # the server side finished last: close both
                for s in (src, dst):
                    try:
                        s.close()
                    except OSError:
                        pass

    def close(self) -> None:
        self._closing = True
        self.sock.close()

    def __enter__(self) -> "CountingProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- memory images ------------------------------------------------------------------------------

# Bytes weighted roughly like English letter frequencies: ~4.1 bits of entropy per byte, so
# zstd compresses it about 2x, like the real /usr/lib mix in baselines.md §5. Built with
# bytes.translate so hundreds of MiB take well under a second.
_TEXT_WEIGHTS = {" ": 40, "e": 26, "t": 19, "a": 16, "o": 15, "i": 14, "n": 14, "s": 13, "h": 12, "r": 12,
                 "d": 9, "l": 8, "c": 6, "u": 6, "m": 5, "w": 4, "f": 4, "g": 4, "y": 4, "p": 4, "b": 3,
                 "\n": 3, "v": 2, "k": 2, ".": 2, ",": 2, "x": 1, "_": 1, "(": 1, ")": 1, "=": 1}


def _text_table() -> bytes:
    table = bytearray()
    for ch, w in _TEXT_WEIGHTS.items():
        table += ch.encode() * w
    assert len(table) <= 256
    while len(table) < 256:
        table += b"e"
    return bytes(table)


_TEXT_TABLE = _text_table()


def text_like(n: int, rng: random.Random) -> bytes:
    return rng.randbytes(n).translate(_TEXT_TABLE)


def random_bytes(n: int, rng: random.Random) -> bytes:
    return rng.randbytes(n)


@dataclass
class ImageInfo:
    path: Path
    size: int
    data_bytes: int  # non-hole bytes written


def make_memory_image(path: Path, size: int, data_bytes: int, seed: int) -> ImageInfo:
    """A sparse image of ``size`` bytes whose ``data_bytes`` (rounded to 4 MiB blocks, spread at
    random) hold data, alternately random and text-like blocks; the rest are holes."""
    rng = random.Random(seed)
    nblocks = size // BLOCK
    chosen = sorted(rng.sample(range(nblocks), data_bytes // BLOCK))
    with open(path, "wb") as f:
        f.truncate(size)
        for i, b in enumerate(chosen):
            f.seek(b * BLOCK)
            f.write(random_bytes(BLOCK, rng) if i % 2 else text_like(BLOCK, rng))
    return ImageInfo(path, size, len(chosen) * BLOCK)


def sparse_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` keeping holes (SEEK_DATA/SEEK_HOLE), never sharing extents."""
    size = src.stat().st_size
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        fo.truncate(size)
        fd = fi.fileno()
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            fi.seek(start)
            fo.seek(start)
            remaining = end - start
            while remaining:
                piece = fi.read(min(8 * MiB, remaining))
                fo.write(piece)
                remaining -= len(piece)
            pos = end


def make_child_image(parent: Path, child: Path, fraction: float, seed: int, run: int = 64 * KiB) -> int:
    """``child`` = ``parent`` with ``fraction`` of its apparent size rewritten in ``run``-byte runs at
    random page-aligned offsets (anywhere: in data or in holes, as a guest allocating memory does),
    half random and half text-like. Returns the number of bytes that now differ, counted in 4 KiB pages."""
    sparse_copy(parent, child)
    rng = random.Random(seed)
    size = parent.stat().st_size
    runs = max(1, int(size * fraction) // run)
    offsets = sorted({rng.randrange(0, (size - run) // PAGE) * PAGE for _ in range(runs)})
    with open(child, "r+b") as f:
        for i, off in enumerate(offsets):
            f.seek(off)
            f.write(random_bytes(run, rng) if i % 2 else text_like(run, rng))
    return changed_bytes(parent, child, PAGE)


def changed_bytes(a: Path, b: Path, granule: int) -> int:
    """Bytes of ``granule``-sized pieces that differ between two equally sized files."""
    changed = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(8 * MiB), fb.read(8 * MiB)
            if not x and not y:
                break
            if x == y:
                continue
            for o in range(0, max(len(x), len(y)), granule):
                if x[o : o + granule] != y[o : o + granule]:
                    changed += min(granule, max(len(x), len(y)) - o)
    return changed


def make_vmstate(path: Path, seed: int) -> None:
    """A small stand-in for a VMM's device state (a few tens of KiB, like QEMU's)."""
    rng = random.Random(seed)
    path.write_bytes(text_like(24 * KiB, rng) + random_bytes(8 * KiB, rng))


def drop_file_cache(path: Path) -> None:
    """Evict one file from the page cache (per file, so other people's work is not disturbed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fs_used(path: Path) -> int:
    """Bytes in use on the filesystem holding ``path`` (statvfs: shared reflinked extents count once)."""
    os.sync()
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def allocated(path: Path) -> int:
    """Allocated bytes under ``path`` by st_blocks (each file counted in full, shared or not)."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def log_problems(path: Path) -> list[str]:
    """Warning/error lines of a hub (JSON lines) or docker-registry (logfmt) log. The registry logs
    every 404 of skopeo's blob existence checks (HEAD before upload) at level=error; those are
    expected and left out."""
    if not path.exists():
        return []
    bad = ('"level": "WARNING"', '"level": "ERROR"', '"level": "CRITICAL"', "level=warning", "level=error",
           "level=fatal", "level=panic", "Traceback")
    expected = ('err.code="blob unknown"',)
    return [line.rstrip() for line in path.read_text(errors="replace").splitlines()
            if any(b in line for b in bad) and not any(e in line for e in expected)]


def log_summary(**logs: Path) -> str:
    """``hub: 0 warnings/errors; registry: 0 …`` plus the first offending line of each, if any."""
    parts = []
    for name, path in logs.items():
        problems = log_problems(path)
        parts.append(f"{name} log: {len(problems)} warning/error lines" + (f" (first: {problems[0][:300]})" if problems else ""))
    return "; ".join(parts)
