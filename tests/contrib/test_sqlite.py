"""The contrib SQLite engine: conformance, and a query type only it answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from iqstate_sqlite import SQLITE_ENGINE, SQLiteKeyValueStore, SQLiteWindowStore, StorageStatsQuery

from iqstate import Application, FailureReason, StateQueryRequest
from iqstate.store import StateStore
from iqstate.testing import StoreConformance, StoreFactory


class TestSQLiteConformance(StoreConformance):
    persistent = True
    manages_offsets = True
    window = True

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(SQLITE_ENGINE)

    def simulate_crash(self, store: StateStore) -> None:
        assert isinstance(store, SQLiteKeyValueStore | SQLiteWindowStore)
        store.abandon()


def test_its_own_query_passes_the_upper_layers_untouched(tmp_path: Path) -> None:
    app = Application("stats", tmp_path)
    app.key_value_store("s", 2, engine="sqlite", caching=True, value_serde="string")
    app.key_value_store("m", 1)
    with app:
        with app.begin_batch() as batch:
            batch.put_all("s", [("a", "xx"), ("bb", "yyy"), ("ccc", "z")])
        request = (
            StateQueryRequest.in_store("s").with_query(StorageStatsQuery()).enable_execution_info()
        )
        result = app.query(request)
        totals = {"entries": 0, "key_bytes": 0, "value_bytes": 0}
        for partition_result in result.partition_results.values():
            for name, value in partition_result.result.items():
                totals[name] += value
            layers = [entry.split(" store ")[0] for entry in partition_result.execution_info]
            assert layers == ["sqlite.key_value", "caching.key_value", "metered.key_value"]
            assert "passed down" in partition_result.execution_info[-1]
        assert totals == {"entries": 3, "key_bytes": 6, "value_bytes": 6}
        other = app.query(StateQueryRequest.in_store("m").with_query(StorageStatsQuery()))
        assert {r.failure_reason for r in other.partition_results.values()} == {
            FailureReason.UNKNOWN_QUERY_TYPE
        }
