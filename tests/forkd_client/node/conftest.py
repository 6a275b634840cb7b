"""The node agent's tests reuse the in-process hub and the second store of the hub client's tests."""

from tests.forkd_client.hub.conftest import InProcessHub, inproc_hub, other_store  # noqa: F401 - fixtures reused here
