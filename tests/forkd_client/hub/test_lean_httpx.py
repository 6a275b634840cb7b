"""forkd_client.hub.lean_httpx: httpx and httpcore imported without click (httpx's CLI) and trio
(httpcore's trio back-end), which stay importable afterwards; a name imported before is untouched."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from forkd_client.hub.lean_httpx import SKIPPED, _hidden

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import json, sys
from forkd_client.hub.client import HubClient
before = {name: name in sys.modules for name in ("click", "rich", "pygments", "trio")}
import httpcore, httpx
stubbed_cli = "httpx._main" not in sys.modules  # httpx stubs its CLI entry point when it cannot import it
trio_backend = sys.modules["httpcore._synchronization"].trio is not None
import click, trio  # installed in this environment: still importable
with HubClient("http://127.0.0.1:9") as client:  # and the client still works: a refused connection, typed
    try:
        client.ping()
    except Exception as e:
        error = type(e).__name__
print(json.dumps({"before": before, "stubbed_cli": stubbed_cli, "trio_backend": trio_backend,
                  "after": {"click": "click" in sys.modules, "trio": "trio" in sys.modules}, "error": error}))
"""


def _run(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    env["FORKD_RETRY_FOR"] = "0"  # its ping of a closed port fails at once instead of being retried for a minute
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name, _ in SKIPPED),
    reason="click and trio must be installed for their import to be skipped",
)
@pytest.mark.e2e  # imports in a fresh interpreter (tests/tiers.py)
def test_the_client_imports_httpx_without_click_or_trio_which_stay_importable():
    found = _run(PROBE)
    assert found["before"] == {"click": False, "rich": False, "pygments": False, "trio": False}
    assert found["stubbed_cli"] and not found["trio_backend"]
    assert found["after"] == {"click": True, "trio": True}
    assert found["error"] == "HubUnreachable"


@pytest.mark.e2e  # imports in a fresh interpreter (tests/tiers.py)
def test_a_module_imported_before_is_left_as_it_is():
    """click imported first (another tool in the same process): httpx imports its CLI as usual."""
    found = _run("import click\n" + PROBE.replace('"click", "rich"', '"rich"'))
    assert not found["stubbed_cli"]


def test_hidden_makes_a_name_unimportable_only_within_the_block():
    name = f"forkd_test_absent_{uuid.uuid4().hex}"
    with _hidden(name):
        assert sys.modules[name] is None
        with pytest.raises(ImportError):
            __import__(name)
    assert name not in sys.modules


def test_hidden_leaves_an_imported_module_alone():
    module = sys.modules["json"]
    with _hidden("json"):
        assert sys.modules["json"] is module
    assert sys.modules["json"] is module
