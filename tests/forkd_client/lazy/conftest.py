"""The in-process hub and the 3-link chain of tests/forkd_client/hub, for the lazy tests."""

from tests.forkd_client.hub.conftest import inproc_hub, other_store  # noqa: F401
