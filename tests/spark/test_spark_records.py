"""The distributed sink's JVM write path (`iqstate_spark.spark_records`): Spark's own
expressions must make every changelog record byte for byte as the store's serdes do, land it
in the partition the serving instances read it from, and refuse what they cannot make."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cluster_support import read_changelog, write_offsets
from hypothesis import given, settings
from hypothesis import strategies as st
from iqstate_kafka import KafkaCluster, LocalBroker
from iqstate_kafka.format import MARKER_KEY, BatchMarker, DataRecord, batch_headers
from iqstate_kafka.topics import changelog_topic
from iqstate_spark import ClusterStores, to_store
from iqstate_spark.cluster_stores import ChangelogStore
from iqstate_spark.distributed import ClusterSink
from iqstate_spark.rows import RowColumns
from iqstate_spark.spark_records import SparkRecords, spark_records

from iqstate import Serdes

INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


def declared(kind: str = "key_value", **serdes: Any) -> ChangelogStore:
    stores = ClusterStores(KafkaCluster("127.0.0.1:9"), "records")
    if kind == "window":
        return stores.window_store("s", 3, **serdes)
    return stores.key_value_store("s", 3, **serdes)


def jvm_records(
    spark: Any,
    store: ChangelogStore,
    rows: list[tuple[Any, ...]],
    schema: str,
    tombstone: str | None = None,
) -> list[tuple[bytes, bytes | None]]:
    """`rows` through the JVM path's columns, collected: (key, value) per row; every header
    checked to be the batch's."""
    frame = spark.createDataFrame(rows, schema)
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    records = spark_records(store, RowColumns.of("s", "k", "v", None, tombstone), types)
    assert isinstance(records, SparkRecords), records
    made = []
    for row in frame.select(*records.columns(11)).collect():
        assert [(h["key"], bytes(h["value"])) for h in row["headers"]] == batch_headers(11)
        made.append((bytes(row["key"]), None if row["value"] is None else bytes(row["value"])))
    return made


@settings(max_examples=12)
@given(st.lists(st.tuples(TEXT, st.one_of(st.none(), INT64), st.booleans()), max_size=40))
def test_string_keys_json_counts_and_tombstones_are_the_serdes_bytes(
    spark: Any, rows: list[tuple[str, int | None, bool]]
) -> None:
    store = declared()
    made = jvm_records(spark, store, rows, "k string, v long, gone boolean", tombstone="gone")
    assert made == [
        (
            store.key_serde.serialize(key),
            None if gone or value is None else store.value_serde.serialize(value),
        )
        for key, value, gone in rows
    ]


@settings(max_examples=12)
@given(st.lists(st.tuples(INT64, st.one_of(st.none(), INT64)), max_size=40))
def test_int64_keys_and_values_are_the_serdes_bytes(
    spark: Any, rows: list[tuple[int, int | None]]
) -> None:
    store = declared(key_serde=Serdes.int64(), value_serde="int64")
    rows = [*rows, (-(2**63), 2**63 - 1), (2**63 - 1, -(2**63)), (-1, 0)]
    assert jvm_records(spark, store, rows, "k long, v long") == [
        (store.key_serde.serialize(k), None if v is None else store.value_serde.serialize(v))
        for k, v in rows
    ]


@settings(max_examples=8)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=10),
            st.one_of(st.none(), st.booleans()),
            st.integers(-(2**31), 2**31 - 1),
            st.integers(-128, 127),
        ),
        max_size=30,
    )
)
def test_bytes_keys_and_json_booleans_and_narrow_ints_are_the_serdes_bytes(
    spark: Any, rows: list[tuple[bytes, bool | None, int, int]]
) -> None:
    store = declared(key_serde="bytes")
    flags = [(bytearray(k), v) for k, v, _, _ in rows]
    assert jvm_records(spark, store, flags, "k binary, v boolean") == [
        (k, None if v is None else store.value_serde.serialize(v)) for k, v, _, _ in rows
    ]
    ints = [(bytearray(k), n) for k, _, n, _ in rows]
    assert [v for _, v in jvm_records(spark, store, ints, "k binary, v int")] == [
        store.value_serde.serialize(n) for _, _, n, _ in rows
    ]
    tiny = [(bytearray(k), n) for k, _, _, n in rows]
    assert [v for _, v in jvm_records(spark, store, tiny, "k binary, v tinyint")] == [
        store.value_serde.serialize(n) for _, _, _, n in rows
    ]


@pytest.mark.parametrize(
    ("store", "columns", "types", "reason"),
    [
        (declared("window"), ("k", "v", None), {"k": "string", "v": "bigint"}, "window store"),
        (
            ClusterStores(KafkaCluster("127.0.0.1:9"), "a").key_value_store(
                "s", 2, partitioner=lambda key, n: 0
            ),
            ("k", "v", None),
            {"k": "string", "v": "bigint"},
            "custom partitioner",
        ),
        (declared(), ("k", ("a", "b"), None), {"k": "string", "a": "int"}, "several columns"),
        (declared(), ("k", "v", "t"), {"k": "string", "v": "int", "t": "int"}, "not boolean"),
        (declared(), ("k", "v", None), {"k": "string", "v": "double"}, "'json' of column 'v'"),
        (declared(), ("k", "v", None), {"k": "string", "v": "string"}, "'json' of column 'v'"),
        (declared(), ("k", "v", None), {"k": "int", "v": "int"}, "'string' of column 'k'"),
        (
            declared(value_serde="int64"),
            ("k", "v", None),
            {"k": "string", "v": "boolean"},
            "'int64' of column 'v' (boolean)",
        ),
    ],
)
def test_what_spark_cannot_make_byte_for_byte_is_left_to_python(
    store: ChangelogStore, columns: tuple[Any, ...], types: dict[str, str], reason: str
) -> None:
    key, value, tombstone = columns
    found = spark_records(store, RowColumns.of("s", key, value, None, tombstone), types)
    assert isinstance(found, str)
    assert reason in found


def changelog_contents(
    cluster: KafkaCluster, app_id: str, partitions: int
) -> dict[int, dict[bytes, bytes | None]]:
    contents: dict[int, dict[bytes, bytes | None]] = {}
    for partition, records in read_changelog(
        cluster, changelog_topic(app_id, "counts"), partitions
    ).items():
        *data, marker = records
        assert isinstance(marker, BatchMarker) and marker.batch_id == 3
        assert all(isinstance(r, DataRecord) and r.batch_id == 3 for r in data)
        contents[partition] = {r.key: r.value for r in data if isinstance(r, DataRecord)}
    return contents


def test_both_write_paths_write_the_same_changelog(
    spark: Any, kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The same rows through Spark's Kafka sink and through the Python producers: the same
    records in the same partitions (the Java producer's murmur2 is the store's)."""
    cluster = KafkaCluster(kafka_broker.bootstrap_servers)
    words = ["spark", "kafka", "Zürich", "日本語", "emoji-🙂", "", "a\x00b", "long-" * 40]
    rows = [(f"{words[i % len(words)]}{i}", i * 7919 - 10**12, i % 5 == 0) for i in range(300)]
    write_offsets(tmp_path, 3, '{"events":{"0":300}}')
    written = {}
    for path in ("auto", "python-producer"):
        app_id = unique_name(path)
        stores = ClusterStores(cluster, app_id)
        stores.key_value_store("counts", 5)
        columns = ("counts", "word", "n", None, "gone", "update", tmp_path, None)
        sink = ClusterSink(
            stores,
            *columns,
            write_path=path,
            allow_gaps=True,  # type: ignore[arg-type]
        )  # batch 3 first: the topics are new
        frame = spark.createDataFrame(rows, "word string, n long, gone boolean").repartition(3)
        sink(frame, 3)
        sink.close()
        assert sink.last_batch == (3, len(rows))
        written[sink.write_path] = changelog_contents(cluster, app_id, 5)
    assert set(written) == {"spark-kafka-sink", "python-producer"}
    assert written["spark-kafka-sink"] == written["python-producer"]
    assert sum(len(p) for p in written["spark-kafka-sink"].values()) == len(rows)


def test_the_jvm_path_refuses_null_keys_the_marker_key_and_text_that_is_not_utf8(
    spark: Any, kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    cluster = KafkaCluster(kafka_broker.bootstrap_servers)
    stores = ClusterStores(cluster, unique_name("app"))
    stores.key_value_store("counts", 2)
    stores.key_value_store("raw", 2, key_serde="bytes")
    stores.key_value_store("texts", 2, value_serde="string")
    write_offsets(tmp_path, 0, '{"events":{"0":1}}')
    sink = to_store(stores, "counts", key="k", value="v", checkpoint=tmp_path)
    with pytest.raises(Exception, match="a row has a null key \\(column 'k'\\)"):
        sink(spark.createDataFrame([("x", 1), (None, 2)], "k string, v long"), 0)
    assert sink.write_path == "spark-kafka-sink"
    assert sink.last_batch is None, "a failed batch is not reported as written"
    raw = to_store(stores, "raw", key="k", value="v", checkpoint=tmp_path)
    with pytest.raises(Exception, match="reserved for the changelog's batch markers"):
        raw(spark.createDataFrame([(bytearray(MARKER_KEY), 1)], "k binary, v long"), 0)
    assert raw.write_path == "spark-kafka-sink"
    # A Spark string holds any bytes: read from Kafka with CAST(value AS STRING), an input
    # record could carry the marker key (or text no serving instance can decode).
    marker = spark.createDataFrame([(bytearray(MARKER_KEY), 1)], "k binary, v long")
    with pytest.raises(Exception, match=r"a row's key \(column 'k'\) is not valid UTF-8"):
        sink(marker.selectExpr("CAST(k AS STRING) AS k", "v"), 0)
    texts = to_store(stores, "texts", key="k", value="v", checkpoint=tmp_path)
    bad_text = spark.createDataFrame([("x", bytearray(b"\xffno"))], "k string, v binary")
    with pytest.raises(Exception, match=r"a row's value \(column 'v'\) is not valid UTF-8"):
        texts(bad_text.selectExpr("k", "CAST(v AS STRING) AS v"), 0)
    assert texts.write_path == "spark-kafka-sink" and sink.last_batch is None
    for opened in (sink, raw, texts):
        opened.close()


def test_settings_the_java_producer_names_differently_keep_the_python_producers(
    spark: Any, kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    cluster = KafkaCluster(
        kafka_broker.bootstrap_servers, client_config={"socket.keepalive.enable": True}
    )
    stores = ClusterStores(cluster, unique_name("app"))
    stores.key_value_store("counts", 2)
    write_offsets(tmp_path, 0, '{"events":{"0":1}}')
    sink = to_store(stores, "counts", key="k", value="v", checkpoint=tmp_path)
    sink(spark.createDataFrame([("x", 1)], "k string, v long"), 0)
    sink.close()
    assert sink.write_path == "python-producer"
    assert "socket.keepalive.enable" in sink.write_path_reason
    key = Serdes.string().serialize("x")
    partition = stores.stores["counts"].partition_of("x", key)
    changelog = read_changelog(cluster, changelog_topic(stores.application_id, "counts"), 2)
    data, marker = changelog[partition]
    assert isinstance(data, DataRecord) and (data.key, data.value, data.batch_id) == (key, b"1", 0)
    assert isinstance(marker, BatchMarker) and marker.batch_id == 0
