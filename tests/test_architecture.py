"""docs/architecture.md names every package, and hub_server's layers contract keeps api over registry over
storage. import-linter itself runs in scripts/check.sh (`lint-imports`), not in the suite."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_architecture_doc_names_every_package():
    text = (ROOT / "docs" / "architecture.md").read_text()
    for package in ("manifest", "vmm", "forkd_client", "hub_server", "web", "clikit"):
        assert f"`{package}`" in text, package


def test_hub_server_is_layered_api_over_registry_over_storage_and_db():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c["type"] == "layers" and c["layers"][0].startswith("hub_server.")]
    level = {
        module.strip(): i for i, layer in enumerate(layered["layers"]) for module in layer.replace(":", "|").split("|")
    }
    assert level["hub_server.api"] < level["hub_server.registry"] < level["hub_server.storage"]
    assert level["hub_server.registry"] < level["hub_server.db"]
    assert layered.get("ignore_imports", []) == ["hub_server.settings -> hub_server.webhooks.guard"]


def test_the_registry_is_layered_by_wing():
    """docs/architecture.md "Inside hub_server.registry": every unit placed (exhaustive), push and read apart."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (wings,) = [c for c in contracts if c.get("containers") == ["hub_server.registry"]]
    assert wings["type"] == "layers" and wings.get("exhaustive") is True
    assert wings["layers"][0] == "service" and wings["layers"][-1] == "core"
    assert "push | read" in wings["layers"] and "ignore_imports" not in wings
