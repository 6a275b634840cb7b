"""docs/ci-publishing.md stays true: its JSON files load with the code that reads them, its workflow is valid
YAML that runs the example script with the variables the script requires."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from forkd_client.hub.signing import TrustedKeys
from hub_server.registry.content.signature_policy import SignaturePolicy
from manifest.signature import fingerprint, public_key_pem

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "ci-publishing.md").read_text()
SCRIPT = (ROOT / "scripts" / "examples" / "ci-publish.sh").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.DOTALL)


def test_the_policy_and_trusted_keys_examples_load(tmp_path: Path) -> None:
    trusted, policy = (json.loads(b) for b in blocks("json"))
    key = Ed25519PrivateKey.generate()
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "ci-signing.key.pub").write_bytes(public_key_pem(key))
    (tmp_path / "policy.json").write_text(json.dumps(policy))
    assert SignaturePolicy.load(tmp_path / "policy.json").describe() == {"team": [fingerprint(key.public_key())]}
    (tmp_path / "trusted-keys.json").write_text(json.dumps(trusted))
    assert TrustedKeys(tmp_path / "trusted-keys.json").for_namespace("team") == [
        tmp_path / "keys" / "ci-signing.key.pub"
    ]


def test_the_workflow_runs_the_script_with_what_it_requires() -> None:
    (workflow,) = blocks("yaml")
    doc = yaml.safe_load(workflow)
    job = doc["jobs"]["publish"]
    runs = " ".join(step.get("run", "") for step in job["steps"])
    assert "scripts/examples/ci-publish.sh" in runs
    required = set(re.findall(r'\[ -n "\$\{(\w+):-\}" \] \|\| die', SCRIPT))
    assert required == {"FORKD_HUB_URL", "FORKD_TOKEN", "REPO", "LINK_EXEC", "FORKD_SIGNING_KEY_PEM"}
    assert required <= set(job["env"])


@pytest.mark.parametrize("name", ["FORKD_TOKEN", "FORKD_SIGNING_KEY_PEM"])
def test_secrets_come_from_the_secret_store(name: str) -> None:
    (workflow,) = blocks("yaml")
    assert yaml.safe_load(workflow)["jobs"]["publish"]["env"][name] == f"${{{{ secrets.{name} }}}}"
