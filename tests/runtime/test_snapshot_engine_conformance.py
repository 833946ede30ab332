"""The test-support snapshot engine is itself a conforming persistent engine."""

import pytest
from support.snapshot_engine import SNAPSHOT_ENGINE, registry_with_snapshot_engines

from iqstate.dispatch import QueryHandlerRegistry
from iqstate.testing import StoreConformance, StoreFactory


class TestSnapshotEngine(StoreConformance):
    persistent = True
    manages_offsets = True

    @pytest.fixture
    def query_handlers(self) -> QueryHandlerRegistry:
        return registry_with_snapshot_engines().query_handlers

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(SNAPSHOT_ENGINE)
