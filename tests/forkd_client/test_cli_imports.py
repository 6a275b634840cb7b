"""Issue 15: ``forkd --help`` and the local commands (``fork``, ``images`` ...) load neither httpx
nor cryptography nor the push/pull machinery; only the hub commands do, when they run
(``forkd_client.cli.hub_commands`` registers their parsers and imports ``cli.hub`` lazily)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HUB_CLIENT_MODULES = (
    "httpx",
    "httpcore",
    "cryptography",
    "forkd_client.cli.hub",
    "forkd_client.hub.client",
    "forkd_client.hub.transport",
    "forkd_client.hub.push",
    "forkd_client.hub.pull",
)
#: what the ``forkd`` console script runs
CONSOLE_SCRIPT = "import sys; from forkd_client.cli.main import main; sys.exit(main())"


def imported_by(tmp_path: Path, *argv: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The modules ``forkd ARGV`` imports (python -X importtime, in a fresh interpreter), and its result."""
    env = {**os.environ, "FORKD_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    env.pop("FORKD_HUB_URL", None)
    env.pop("FORKD_TOKEN", None)
    env["FORKD_RETRY_FOR"] = "0"  # the closed port fails at once instead of being retried for a minute
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CONSOLE_SCRIPT, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    # findall, not per line: the command's own stderr lines may run into importtime's
    modules = set(re.findall(r"import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)", done.stderr))
    return modules, done


def hub_client_modules(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HUB_CLIENT_MODULES))


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("fork", "--help"), ("push", "--help"), ("images",), ("fork", "nosuch"), ("keygen", "--help")],
    ids=["help", "fork-help", "push-help", "images", "fork-missing", "keygen-help"],
)
def test_local_commands_do_not_import_the_hub_client(tmp_path, argv):
    modules, done = imported_by(tmp_path, *argv)
    assert "forkd_client.cli.main" in modules, done.stderr[-2000:]  # the probe sees the imports
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert hub_client_modules(modules) == [], f"forkd {' '.join(argv)} imported them"


#: what ``forkd --help`` (issue 31's start-up goal: under 150 ms) needs none of: the image builder, the store
#: and its verification cache, prune. ``forkd_client.images.errors`` is imported (the exit-code table maps it)
#: but the ``images`` package loads its builder only when a name of it is used.
NOT_FOR_HELP = (
    "forkd_client.images.build",
    "forkd_client.images.apply",
    "forkd_client.images.fetch",
    "forkd_client.store",
    "forkd_client.snapdir",
    "forkd_client.verified",
    "forkd_client.prune",
    "forkd_client.hub.credentials",
)


def test_help_loads_only_the_parsers(tmp_path):
    modules, done = imported_by(tmp_path, "--help")
    assert done.returncode == 0 and "forkd_client.images.errors" in modules, done.stderr[-2000:]
    assert sorted(m for m in modules if m in NOT_FOR_HELP) == [], "forkd --help imported them"


def test_images_opens_the_store_when_it_runs(tmp_path):
    """The control: ``forkd images`` imports the store (through ``Context.store``) and lists an empty one."""
    modules, done = imported_by(tmp_path, "images")
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"forkd_client.store", "forkd_client.snapdir"} <= modules


def test_a_hub_command_imports_them_when_it_runs(tmp_path):
    """The control: ``forkd search`` against a closed port loads the client, then fails cleanly."""
    modules, done = imported_by(tmp_path, "search", "--hub", "http://127.0.0.1:9")
    assert {"httpx", "forkd_client.cli.hub", "forkd_client.hub.client"} <= modules
    assert done.returncode == 5, done.stderr[-2000:]  # network error, no traceback
    assert "Traceback" not in done.stderr


#: what ``forkd pull`` (of a hub reference, no trusted keys, output piped) needs none of before its
#: first request: push, provenance and forkd-registry pulls, cryptography, the version lookup,
#: httpx's own CLI (click, rich, pygments) and httpcore's trio back-end (forkd_client.hub.lean_httpx)
NOT_FOR_A_PULL = (
    "forkd_client.hub.push",
    "forkd_client.hub.provenance",
    "forkd_client.hub.forkd_registry",
    "cryptography",
    "manifest.signature",
    "importlib.metadata",
    "click",
    "rich",
    "pygments",
    "trio",
)
#: run ``forkd ARGV`` in-process, then print the modules it loaded (names only: failed imports are not kept)
MODULES_AFTER = (
    "import json, sys\n"
    "from forkd_client.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print(json.dumps(sorted(name for name, m in sys.modules.items() if m is not None)))\n"
    "sys.exit(code)\n"
)


def modules_after_pull(tmp_path: Path) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The modules loaded by ``forkd pull`` of a hub reference on a closed port (its whole start-up:
    parser, credentials, trusted keys, client, the chain request, which fails), and its result."""
    env = {**os.environ, "FORKD_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    env.pop("FORKD_HUB_URL", None)
    env.pop("FORKD_TOKEN", None)
    env["FORKD_RETRY_FOR"] = "0"  # the closed port fails at once instead of being retried for a minute
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, "-c", MODULES_AFTER, "pull", "127.0.0.1:9/acme/chain:v1", "--as", "head"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return set(json.loads(done.stdout.splitlines()[-1])) if done.stdout.strip() else set(), done


def test_a_pull_imports_only_what_a_pull_needs(tmp_path):
    """By the time a pull's chain request fails, it loaded the pull machinery and none of ``NOT_FOR_A_PULL``."""
    modules, done = modules_after_pull(tmp_path)
    assert done.returncode == 5, done.stderr[-2000:]  # network error, no traceback
    assert "Traceback" not in done.stderr and "unreachable" in done.stderr
    assert {"httpx", "httpcore", "forkd_client.hub.pull", "forkd_client.hub.lean_httpx"} <= modules
    loaded = sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_FOR_A_PULL))
    assert loaded == [], "forkd pull imported them"


def test_a_pull_with_a_trusted_key_loads_cryptography(tmp_path):
    """The control: with a trusted-keys file naming a key for the namespace, the same pull reads the
    key (cryptography) before its first request."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from manifest.signature import public_key_pem

    (tmp_path / "cfg" / "forkd").mkdir(parents=True)
    (tmp_path / "cfg" / "forkd" / "acme.pub").write_bytes(public_key_pem(Ed25519PrivateKey.generate().public_key()))
    (tmp_path / "cfg" / "forkd" / "trusted-keys.json").write_text('{"namespaces": {"acme": ["acme.pub"]}}')
    modules, done = modules_after_pull(tmp_path)
    assert done.returncode == 5, done.stderr[-2000:]
    assert {"cryptography", "manifest.signature"} <= modules
