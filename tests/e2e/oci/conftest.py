"""A real ``forkd-hub serve`` for the OCI interop and conformance tests, with an admin token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.hubproc import HubProcess


@pytest.fixture(scope="module")
def oci_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubProcess]:
    root = tmp_path_factory.mktemp("oci-hub")
    hub = HubProcess(root / "data", root / "serve.log")
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def admin_token(oci_hub: HubProcess) -> str:
    return oci_hub.token("oci-admin", "admin")


@pytest.fixture(scope="module")
def host(oci_hub: HubProcess) -> str:
    """``127.0.0.1:PORT``: what goes before the repository in a ``docker://`` reference."""
    return oci_hub.url.removeprefix("http://")
