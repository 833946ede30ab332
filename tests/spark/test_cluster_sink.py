"""The distributed sink on a real broker: each micro-batch's rows become changelog records
(store serdes, the store's partitions, tombstones, window keys, the batch id) written by
Spark tasks, then one marker per changelog partition with the batch id and the position."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cluster_support import read_changelog, write_offsets
from iqstate_kafka import KafkaCluster, LocalBroker
from iqstate_kafka.format import BatchMarker, DataRecord
from iqstate_kafka.topics import changelog_topic
from iqstate_spark import ClusterStores, to_store

from iqstate import Application, Position, Serdes
from iqstate.errors import IncompatibleStateError, IqstateError, UnknownStateStoreError
from iqstate.keyspace import encode_window_key


@pytest.fixture
def cluster(kafka_broker: LocalBroker) -> KafkaCluster:
    return KafkaCluster(kafka_broker.bootstrap_servers)


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """`reference(declare)`: an embedded Application declaring the same store, whose spec
    says which partition and bytes the serving instances expect."""
    apps: list[Application] = []

    def make(declare: Callable[[Application], Any]) -> Any:
        app = Application("reference", tmp_path / f"ref{len(apps)}")
        apps.append(app)
        return declare(app)

    yield make
    for app in apps:
        app.close()


def test_rows_become_records_of_the_store_partitions_then_markers(
    spark: Any,
    cluster: KafkaCluster,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    reference: Callable[..., Any],
) -> None:
    app_id = unique_name("app")
    stores = ClusterStores(cluster, app_id)
    stores.key_value_store("counts", 3)
    spec = reference(lambda app: app.key_value_store("counts", 3))
    rows = [(f"word-{i}", i, i % 7 == 0) for i in range(60)] + [("gone", None, False)]
    df = spark.createDataFrame(rows, "word string, n long, deleted boolean").repartition(3)
    write_offsets(tmp_path, 4, '{"events":{"0":41,"1":17}}')
    sink = to_store(stores, "counts", key="word", value="n", tombstone="deleted",
                    checkpoint=tmp_path, allow_gaps=True)  # fmt: skip  # batch 4 first
    sink(df, 4)
    assert sink.last_batch == (4, 61)

    position = Position.from_map({"events": {0: 41, 1: 17}})
    changelog = read_changelog(cluster, changelog_topic(app_id, "counts"), 3)
    expected: dict[int, dict[bytes, bytes | None]] = {0: {}, 1: {}, 2: {}}
    for word, n, deleted in rows:
        key = spec.key_serde.serialize(word)
        value = None if deleted or n is None else spec.value_serde.serialize(n)
        expected[spec.partition_of(word, key)][key] = value
    for partition, records in changelog.items():
        *data, marker = records
        assert isinstance(marker, BatchMarker), "each partition ends with the batch's marker"
        assert (marker.batch_id, marker.position) == (4, position)
        assert all(isinstance(r, DataRecord) and r.batch_id == 4 for r in data)
        assert {r.key: r.value for r in data if isinstance(r, DataRecord)} == expected[partition]
        assert len(data) == len(expected[partition]), "every row written exactly once"


def test_window_rows_carry_the_window_start_in_the_key(
    spark: Any,
    cluster: KafkaCluster,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    reference: Callable[..., Any],
) -> None:
    from pyspark.sql import functions as F

    app_id = unique_name("app")
    stores = ClusterStores(cluster, app_id)
    stores.window_store("per-minute", 2, value_serde=Serdes.int64())
    spec = reference(
        lambda app: app.window_store("per-minute", 2, 60_000, 600_000, value_serde="int64")
    )
    events = [("a", datetime(2026, 1, 1, 0, m % 3, 5, tzinfo=UTC)) for m in range(9)]
    events += [("b", datetime(2026, 1, 1, 0, 1, 59, tzinfo=UTC))]
    frame = spark.createDataFrame(events, "word string, ts timestamp")
    counts = frame.groupBy(F.window("ts", "1 minute"), "word").count()
    write_offsets(tmp_path, 0, '{"events":{"0":10}}')
    to_store(stores, "per-minute", key="word", value="count", checkpoint=tmp_path)(counts, 0)

    base = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    expected = {("a", base): 3, ("a", base + 60_000): 3, ("a", base + 120_000): 3}
    expected[("b", base + 60_000)] = 1
    changelog = read_changelog(cluster, changelog_topic(app_id, "per-minute"), 2)
    written = {}
    for partition, records in changelog.items():
        for record in records[:-1]:
            assert isinstance(record, DataRecord)
            written[record.key] = (partition, record.value)
    assert written == {
        encode_window_key(spec.key_serde.serialize(word), start): (
            spec.partition_of(word, spec.key_serde.serialize(word)),
            Serdes.int64().serialize(count),
        )
        for (word, start), count in expected.items()
    }


def test_bad_declarations_and_rows_are_refused_clearly(
    spark: Any, cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    stores = ClusterStores(cluster, unique_name("app"))
    stores.key_value_store("counts", 2, partitioner=lambda key, partitions: 5)
    with pytest.raises(ValueError, match="declared twice"):
        stores.key_value_store("counts", 2)
    with pytest.raises(UnknownStateStoreError, match="declares no store 'nope'"):
        to_store(stores, "nope", key="k")
    with pytest.raises(ValueError, match="output_mode must be append or update"):
        to_store(stores, "counts", key="k", output_mode="complete")
    with pytest.raises(ValueError, match="key-value store; window= does not apply"):
        to_store(stores, "counts", key="k", window="w")
    write_offsets(tmp_path, 0, '{"events":{"0":1}}')
    sink = to_store(stores, "counts", key="k", value="v", checkpoint=tmp_path)
    with pytest.raises(IqstateError, match=r"no column\(s\) \['v'\]"):
        sink(spark.createDataFrame([("x", 1)], "k string, n long"), 0)
    with pytest.raises(Exception, match="returned 5; the store has partitions 0..1"):
        sink(spark.createDataFrame([("x", 1)], "k string, v long"), 0)
    assert sink.last_batch is None, "a failed batch is not reported as written"


def test_a_query_whose_earlier_batches_are_in_no_changelog_is_refused(
    spark: Any, cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The checkpoint is at batch 6 but the changelog holds no batch (deleted and made
    again, another application id): every replica would take batch 6 as the store's first
    and serve it without batches 0..5, saying nothing. The batch is refused, nothing is
    written; a changelog that holds batches, or `allow_gaps=True`, takes it."""
    from iqstate import BatchGapError

    app_id = unique_name("app")
    stores = ClusterStores(cluster, app_id)
    stores.key_value_store("counts", 2)
    rows = spark.createDataFrame([("a", 1)], "k string, v long")
    topic = changelog_topic(app_id, "counts")
    write_offsets(tmp_path, 6, '{"events":{"0":6}}')
    sink = to_store(stores, "counts", key="k", value="v", checkpoint=tmp_path)
    with pytest.raises(BatchGapError, match=r"checkpoint is at batch 6, .*batches 0..5"):
        sink(rows, 6)
    assert sink.last_batch is None
    assert all(records == [] for records in read_changelog(cluster, topic, 2).values())
    accepting = to_store(stores, "counts", key="k", value="v", checkpoint=tmp_path,
                         allow_gaps=True)  # fmt: skip
    accepting(rows, 6)
    write_offsets(tmp_path, 7, '{"events":{"0":7}}')
    following = to_store(stores, "counts", key="k", value="v", checkpoint=tmp_path)
    following(rows, 7)  # the changelog holds batch 6
    markers = [r for rs in read_changelog(cluster, topic, 2).values() for r in rs]
    assert sorted(m.batch_id for m in markers if isinstance(m, BatchMarker)) == [6, 6, 7, 7]
    for made in (sink, accepting, following):
        made.close()


def test_a_sink_declaring_a_store_otherwise_than_the_serving_instances_is_refused(
    cluster: KafkaCluster, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    # Its values would reach every replica and fail every read of those keys there.
    app_id = unique_name("unlike")
    serving = Application(
        app_id, tmp_path / "serving", application_server="127.0.0.1:7099", cluster=cluster
    )
    serving.key_value_store("counts", 2, value_serde="json")
    with serving:
        unlike = ClusterStores(cluster, app_id)
        unlike.key_value_store("counts", 2, value_serde="int64")
        with pytest.raises(IncompatibleStateError, match="value_serde int64 here, as .*json"):
            to_store(unlike, "counts", key="k", value="v")
        alike = ClusterStores(cluster, app_id)
        alike.key_value_store("counts", 2, value_serde="json")
        assert callable(to_store(alike, "counts", key="k", value="v"))
