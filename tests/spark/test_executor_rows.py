"""A Spark task's rows as changelog entries (`entries_by_partition`, the Python write path):
a key or value its serde refuses fails the task naming the store and the column, not only
the serde (Spark shows the driver the task's error after its retries)."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest
from iqstate_kafka import KafkaCluster
from iqstate_spark import ClusterStores
from iqstate_spark.executor_write import entries_by_partition
from iqstate_spark.rows import RowColumns

from iqstate.errors import IqstateError


def grouped(rows: dict[str, list[object]], value: str | list[str] | None = "v") -> object:
    stores = ClusterStores(KafkaCluster("127.0.0.1:9"), "rows")
    store = stores.key_value_store("s", 2)
    columns = RowColumns.of("s", "k", value, None, None)
    return list(entries_by_partition(store, columns, [pa.RecordBatch.from_pydict(rows)]))


def test_a_value_its_serde_refuses_names_the_store_and_column() -> None:
    noon = datetime(2026, 11, 30, 12, tzinfo=UTC)
    with pytest.raises(IqstateError, match=r"to_store\('s'\): a row's value \(column 'v'\)"):
        grouped({"k": ["a"], "v": [noon]})
    with pytest.raises(IqstateError, match=r"a row's value \(columns \['v', 'w'\]\)"):
        grouped({"k": ["a"], "v": [1], "w": [noon]}, ["v", "w"])


def test_a_key_its_serde_refuses_names_the_store_and_column() -> None:
    with pytest.raises(IqstateError, match=r"to_store\('s'\): a row's key \(column 'k'\)"):
        grouped({"k": [5], "v": [1]})  # the string serde takes text only


def test_rows_its_serdes_take_become_entries() -> None:
    entries = [entry for _, part in grouped({"k": ["a", "b"], "v": [1, None]}) for entry in part]
    assert sorted(entries, key=lambda entry: entry[0]) == [(b"a", b"1"), (b"b", None)]


def test_a_map_column_is_an_object_and_one_with_struct_keys_a_list_of_pairs() -> None:
    plain = pa.array([[("x", 1)]], pa.map_(pa.string(), pa.int64()))
    (entries,) = (part for _, part in grouped({"k": ["a"], "v": plain}))
    assert entries == [(b"a", b'{"x":1}')]
    point = pa.struct([("x", pa.int64())])
    keyed = pa.array([[({"x": 1}, 2)]], pa.map_(point, pa.int64()))
    (entries,) = (part for _, part in grouped({"k": ["a"], "v": keyed}))
    assert entries == [(b"a", b'[[{"x":1},2]]')]
