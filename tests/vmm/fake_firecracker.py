#!/usr/bin/env python3
"""A recorded-API fake of the ``firecracker`` binary, for tests on hosts without KVM.

It serves Firecracker's REST API on ``--api-sock`` and checks every request body and the call
ordering against the documented API (swagger ``src/firecracker/swagger/firecracker.yaml``, v1.x):
required fields, types, enums, unknown fields (Firecracker rejects them), pre-boot-only and
post-boot-only calls, "load a snapshot only into a fresh process", "snapshot only when paused",
"Diff needs dirty-page tracking". A violation is answered ``400 {"fault_message": ...}`` as
Firecracker does. Every request is appended to ``fake-firecracker.requests.jsonl`` in the cwd.

Guest RAM is an mmap: anonymous after ``InstanceStart``, ``MAP_PRIVATE`` of the memory file after
``/snapshot/load`` (so the file is provably never written, and smaps accounting is real). Snapshot
files are real files: ``vmstate`` is JSON, the memory file holds the RAM's non-zero pages (Full) or
only the dirty pages (Diff), sparse. The serial console (stdin/stdout) answers the forkd agent
protocol; ``run`` executes the command with the host's ``sh`` in a scratch directory, so tests must
only send harmless commands (echo, exit, sleep).
"""

from __future__ import annotations

import base64
import http.server
import json
import mmap
import os
import socketserver
import subprocess
import sys
import threading
from typing import Any

VERSION = "1.7.0"
PAGE = 4096
BOOL, INT, STR, OBJ, LIST = bool, int, str, dict, list

# (method, path) → (required fields, optional fields); a set of strings is an enum.
SCHEMAS: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {
    ("PUT", "/machine-config"): (
        {"vcpu_count": INT, "mem_size_mib": INT},
        {"smt": BOOL, "track_dirty_pages": BOOL, "cpu_template": STR, "huge_pages": {"None", "Transparent", "2M"}},
    ),
    ("PUT", "/boot-source"): ({"kernel_image_path": STR}, {"boot_args": STR, "initrd_path": STR}),
    ("PUT", "/drives/"): (
        {"drive_id": STR, "is_root_device": BOOL},
        {
            "partuuid": STR,
            "cache_type": {"Unsafe", "Writeback"},
            "is_read_only": BOOL,
            "path_on_host": STR,
            "rate_limiter": OBJ,
            "io_engine": {"Sync", "Async"},
            "socket": STR,
        },
    ),
    ("PATCH", "/drives/"): ({"drive_id": STR}, {"path_on_host": STR, "rate_limiter": OBJ}),
    ("PUT", "/actions"): ({"action_type": {"FlushMetrics", "InstanceStart", "SendCtrlAltDel"}}, {}),
    ("PATCH", "/vm"): ({"state": {"Paused", "Resumed"}}, {}),
    ("PUT", "/snapshot/create"): ({"mem_file_path": STR, "snapshot_path": STR}, {"snapshot_type": {"Full", "Diff"}}),
    ("PUT", "/snapshot/load"): (
        {"snapshot_path": STR},
        {
            "mem_file_path": STR,
            "mem_backend": OBJ,
            "enable_diff_snapshots": BOOL,
            "track_dirty_pages": BOOL,
            "resume_vm": BOOL,
            "network_overrides": LIST,
            "vsock_override": OBJ,
            "clock_realtime": BOOL,
        },
    ),
}


class Fault(Exception):
    """A request Firecracker would reject with 400."""


class FakeVm:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.resumed = threading.Event()
        self.state = "Not started"
        self.configured = False  # any pre-boot configuration call happened
        self.machine = {"vcpu_count": 1, "mem_size_mib": 128, "track_dirty_pages": False}
        self.boot_source: dict[str, Any] | None = None
        self.drives: dict[str, dict[str, Any]] = {}
        self.ram: mmap.mmap | None = None
        self.dirty: set[int] = set()
        self.commands = 0

    # -- API -------------------------------------------------------------------------------

    def handle(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        if method == "GET" and path == "/version":
            return {"firecracker_version": VERSION}
        if method == "GET" and path == "/":
            return {"app_name": "Firecracker", "id": "fake", "state": self.state, "vmm_version": VERSION}
        key = (method, "/drives/" if path.startswith("/drives/") else path)
        if key not in SCHEMAS:
            raise Fault(f"Invalid request method and/or path: {method} {path}")
        validate(body, *SCHEMAS[key])
        assert body is not None
        started = self.state != "Not started"
        if key in (("PUT", "/machine-config"), ("PUT", "/boot-source"), ("PUT", "/drives/")):
            if started:
                raise Fault("The requested operation is not supported after starting the microVM.")
            self.configured = True
            if key[1] == "/machine-config":
                if not 1 <= body["vcpu_count"] <= 32:
                    raise Fault("vcpu_count must be in [1, 32]")
                self.machine = {"track_dirty_pages": False, **body}
            elif key[1] == "/boot-source":
                self.boot_source = body
            else:
                if body["drive_id"] != path.removeprefix("/drives/"):
                    raise Fault("The id from the path does not match the id from the body!")
                self.drives[body["drive_id"]] = body
            return None
        if key == ("PUT", "/actions"):
            if body["action_type"] != "InstanceStart":
                return None
            if started:
                raise Fault("The microVM is already running.")
            if self.boot_source is None:
                raise Fault("Cannot start microvm without kernel configuration.")
            self.ram = mmap.mmap(-1, self.machine["mem_size_mib"] << 20)
            self.touch(0, b"fake kernel booted")
            self.set_state("Running")
            return None
        if key == ("PATCH", "/drives/"):
            if not started:
                raise Fault("The requested operation is not supported before starting the microVM.")
            drive = self.drives.get(body["drive_id"])
            if drive is None:
                raise Fault(f"Invalid block device ID: {body['drive_id']}")
            drive.update(body)
            return None
        if key == ("PATCH", "/vm"):
            if not started:
                raise Fault("The requested operation is not supported before starting the microVM.")
            self.set_state("Paused" if body["state"] == "Paused" else "Running")
            return None
        if key == ("PUT", "/snapshot/create"):
            return self.create_snapshot(body)
        return self.load_snapshot(body)

    def create_snapshot(self, body: dict[str, Any]) -> None:
        if self.state != "Paused":
            raise Fault("Cannot create a snapshot while the microVM is not paused.")
        diff = body.get("snapshot_type", "Full") == "Diff"
        if diff and not self.machine.get("track_dirty_pages"):
            raise Fault("Diff snapshots are not allowed on uVMs with dirty page tracking disabled.")
        assert self.ram is not None
        with open(body["mem_file_path"], "wb") as f:
            f.truncate(len(self.ram))
            pages = sorted(self.dirty) if diff else range(len(self.ram) // PAGE)
            for page in pages:
                chunk = self.ram[page * PAGE : (page + 1) * PAGE]
                if diff or chunk.count(0) != PAGE:
                    f.seek(page * PAGE)
                    f.write(chunk)
        state = {"fake_firecracker_vmstate": 1, "machine": self.machine, "drives": self.drives}
        with open(body["snapshot_path"], "w") as f:
            json.dump(state, f)
        self.dirty.clear()

    def load_snapshot(self, body: dict[str, Any]) -> None:
        if self.configured or self.state != "Not started":
            raise Fault("Loading a microVM snapshot not allowed after configuring boot-specific resources.")
        if ("mem_file_path" in body) == ("mem_backend" in body):
            raise Fault("Exactly one of mem_file_path or mem_backend must be present.")
        backend = body.get("mem_backend") or {"backend_type": "File", "backend_path": body["mem_file_path"]}
        validate(backend, {"backend_type": {"File", "Uffd"}, "backend_path": STR}, {})
        if backend["backend_type"] != "File":
            raise Fault("the fake supports only the File memory backend")
        try:
            with open(body["snapshot_path"]) as f:
                state = json.load(f)
        except (OSError, ValueError) as exc:
            raise Fault(f"Cannot load snapshot state: {exc}") from exc
        size = state["machine"]["mem_size_mib"] << 20
        fd = os.open(backend["backend_path"], os.O_RDONLY)  # MAP_PRIVATE needs no write access
        try:
            if os.fstat(fd).st_size != size:
                raise Fault(f"memory file size {os.fstat(fd).st_size} != {size}")
            self.ram = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        for drive in state["drives"].values():  # Firecracker reopens the recorded drive paths
            if drive.get("path_on_host") and not os.path.exists(drive["path_on_host"]):
                raise Fault(f"Cannot restore block device: {drive['path_on_host']} not found")
        self.machine = {**state["machine"], "track_dirty_pages": bool(body.get("track_dirty_pages"))}
        self.drives = state["drives"]
        self.set_state("Running" if body.get("resume_vm") else "Paused")

    def set_state(self, state: str) -> None:
        self.state = state
        (self.resumed.set if state == "Running" else self.resumed.clear)()

    def touch(self, page: int, data: bytes) -> None:
        assert self.ram is not None
        page %= len(self.ram) // PAGE
        self.ram[page * PAGE : page * PAGE + len(data)] = data
        self.dirty.add(page)

    # -- serial console: the forkd agent protocol -------------------------------------------

    def serve_console(self) -> None:
        scratch = os.path.abspath("guest-scratch")  # inside the VM's work dir, removed with it
        os.makedirs(scratch, exist_ok=True)
        out = sys.stdout.buffer
        out.write(b"fake firecracker: serial console up\n")
        out.flush()
        for raw in sys.stdin.buffer:
            parts = raw.decode(errors="replace").split()
            if len(parts) < 2:
                continue
            self.resumed.wait()  # a paused guest answers nothing
            nonce, op, args = parts[0], parts[1], parts[2:]
            rc, output = 0, b""
            if op == "hello":
                output = b"fake-firecracker-guest\n"
            elif op == "reseed":
                rc = 0 if args and base64.b64decode(args[0]) else 1
            elif op == "run":
                cmd = base64.b64decode(args[1]).decode()
                self.commands += 1
                self.touch(self.commands, cmd.encode()[:PAGE])
                try:
                    proc = subprocess.run(
                        ["sh", "-c", cmd],
                        cwd=scratch,
                        stdin=subprocess.DEVNULL,
                        capture_output=True,
                        timeout=int(args[0]),
                    )
                    rc, output = proc.returncode, proc.stdout + proc.stderr
                except subprocess.TimeoutExpired:
                    rc = 137
            else:
                rc, output = 127, f"unknown op {op}\n".encode()
            encoded = base64.encodebytes(output) if output else b""
            out.write(f"{nonce} begin\n".encode() + encoded + f"{nonce} end {rc}\n".encode())
            out.flush()


def validate(body: Any, required: dict[str, Any], optional: dict[str, Any]) -> None:
    if not isinstance(body, dict):
        raise Fault("the request body must be a JSON object")
    for name in required:
        if name not in body:
            raise Fault(f"missing field `{name}`")
    for name, value in body.items():
        kind = required.get(name, optional.get(name))
        if kind is None:
            raise Fault(f"unknown field `{name}`")
        if isinstance(kind, set):
            if value not in kind:
                raise Fault(f"unknown variant `{value}` for `{name}`, expected one of {sorted(kind)}")
        elif not isinstance(value, kind) or (kind is INT and isinstance(value, bool)):
            raise Fault(f"invalid type for `{name}`: expected {kind.__name__}")


def serve(api_sock: str) -> None:
    vm = FakeVm()
    log = open("fake-firecracker.requests.jsonl", "a", buffering=1)  # noqa: SIM115 - open for the process lifetime

    class Handler(http.server.BaseHTTPRequestHandler):
        def _dispatch(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = "<invalid json>"
            log.write(json.dumps({"method": self.command, "path": self.path, "body": body}) + "\n")
            try:
                with vm.lock:
                    result = vm.handle(self.command, self.path, body)
                status, payload = (200, json.dumps(result).encode()) if result is not None else (204, b"")
            except Fault as exc:
                status, payload = 400, json.dumps({"fault_message": str(exc)}).encode()
            self.send_response(status)
            if payload:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_PATCH = _dispatch

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write("fake-firecracker: " + format % args + "\n")

    server = socketserver.UnixStreamServer(api_sock, Handler)
    threading.Thread(target=vm.serve_console, daemon=True).start()
    server.serve_forever()


def main(argv: list[str]) -> int:
    if "--version" in argv:
        print(f"Firecracker v{VERSION}\n")
        return 0
    if "--api-sock" not in argv:
        print("usage: firecracker --api-sock PATH", file=sys.stderr)
        return 2
    serve(argv[argv.index("--api-sock") + 1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
