"""MemoryStore passes the shared blob store suite."""

from collections.abc import AsyncIterator

import pytest

from hub_server.storage.base import BlobStore
from hub_server.storage.memory import MemoryStore
from hub_server.storage.testing import BlobStoreConformance


class TestMemoryStore(BlobStoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[BlobStore]:
        store = MemoryStore()
        yield store
        await store.close()

    async def staged_count(self, store: BlobStore) -> int:
        assert isinstance(store, MemoryStore)
        return len(store._staged)
