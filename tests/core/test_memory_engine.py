"""The memory engine passes the conformance suite."""

import pytest

from iqstate.engines.memory import MEMORY_ENGINE
from iqstate.testing import StoreConformance, StoreFactory


class TestMemoryEngineConformance(StoreConformance):
    persistent = False
    manages_offsets = False
    window = True

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(MEMORY_ENGINE)
