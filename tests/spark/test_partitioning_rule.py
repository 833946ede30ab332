"""One partitioning rule (`iqstate.runtime.partitioner.partition_function`): every component
that picks a key's partition (the runtime's stores and discovery, the Spark writers' Python
tasks and the JVM write path) picks the same one for every shape of partitioner, and refuses
the same answers with the same error, so a record lands in the partition that serves it."""

from __future__ import annotations

import pickle
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
from iqstate_http import RemoteQueryClient, RemoteServiceError, start_background
from iqstate_http.codecs import path_segment
from iqstate_kafka import KafkaCluster
from iqstate_spark import ClusterStores
from iqstate_spark.executor_write import entries_by_partition
from iqstate_spark.rows import RowColumns
from iqstate_spark.spark_records import SparkRecords, spark_records

from iqstate import Application, KeyQuery, StateQueryRequest
from iqstate.runtime import partition_for_bytes

ACCEPTED = ("int", "set", "frozenset", "list", "tuple")
REFUSED = ("bool", "out of range", "negative", "several", "empty", "string")
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)

Chosen = list[int] | str
"""A component's partition for each key, or the error it refused the keys with."""


@dataclass(frozen=True)
class ShapedPartitioner:
    """A custom partitioner answering in one `shape` (a key's partition by CRC-32, or a
    refused answer); a plain value, so it pickles as Spark ships it to executors."""

    shape: str

    def __call__(self, key: str, partitions: int) -> Any:
        chosen = self.number(key, partitions)
        return {
            "int": chosen,
            "set": {chosen},
            "frozenset": frozenset({chosen}),
            "list": [chosen],
            "tuple": (chosen,),
            "bool": True,
            "out of range": partitions,
            "negative": -1,
            "several": {0, 1},
            "empty": set(),
            "string": str(chosen),
        }[self.shape]

    @staticmethod
    def number(key: str, partitions: int) -> int:
        return zlib.crc32(key.encode()) % partitions


def partitioner_of(shape: str | None) -> ShapedPartitioner | None:
    return None if shape is None else ShapedPartitioner(shape)


def outcome(choose: Any, keys: Sequence[str]) -> Chosen:
    """`[choose(key) for key in keys]`, or the error that refused one."""
    try:
        return [choose(key) for key in keys]
    except ValueError as error:
        return f"ValueError: {error}"


def writer_tasks(stores: ClusterStores, keys: Sequence[str]) -> Chosen:
    """Where the Spark writers' Python tasks put `keys`: the store shipped as Spark ships it
    (pickled), its rows grouped by `entries_by_partition` as a task groups them."""
    shipped = pickle.loads(pickle.dumps(stores.stores["s"]))
    rows = pa.RecordBatch.from_pydict({"k": list(keys), "v": [1] * len(keys)})
    columns = RowColumns.of("s", "k", "v", None, None)
    try:
        grouped = entries_by_partition(shipped, columns, [rows])
        partition_of = {key: p for (_, p), entries in grouped for key, _ in entries}
    except ValueError as error:
        return f"ValueError: {error}"
    return [partition_of[shipped.key_serde.serialize(key)] for key in keys]


def partitions_by_component(
    partitions: int, partitioner: ShapedPartitioner | None, keys: Sequence[str]
) -> dict[str, Chosen]:
    """Each component's partition for every key of a store `s` declared alike everywhere
    (string keys, `partitions`, `partitioner`), or the error it refused them with.

    Every component that picks a key's partition belongs here, so that the tests below hold
    it to the others: the runtime's store and discovery, the Spark writers' Python path, the
    HTTP service's key route and the routing client (its own rule where it computes the
    partition itself, else the partition it was answered for).
    """
    stores = ClusterStores(KafkaCluster("127.0.0.1:9"), "rule")
    writer = stores.key_value_store("s", partitions, partitioner=partitioner)
    with tempfile.TemporaryDirectory() as state_dir:
        app = Application("rule", state_dir=state_dir)
        spec = app.key_value_store("s", partitions, partitioner=partitioner)
        with app:

            def located(key: str) -> int:
                found = app.query_metadata_for_key("s", key)
                assert found is not None
                return found.partition

            return {
                "runtime store": outcome(
                    lambda key: spec.partition_of(key, spec.key_serde.serialize(key)), keys
                ),
                "runtime discovery": outcome(located, keys),
                "spark writer store": outcome(
                    lambda key: writer.partition_of(key, writer.key_serde.serialize(key)), keys
                ),
                "spark writer tasks": writer_tasks(stores, keys),
                **served(app, keys),
            }


def served(app: Application, keys: Sequence[str]) -> dict[str, Chosen]:
    """The partitions the HTTP service answers `keys` from, and the routing client's."""
    server = start_background(app)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:

            def answered(key: str) -> int:
                response = http.get(f"/v1/stores/s/keys/{path_segment(key)}")
                if response.status_code != 200:
                    message = response.json()["error"]["message"]
                    raise ValueError(message.removeprefix("ValueError: "))
                return int(response.json()["partition"])

            service = outcome(answered, keys)
        with RemoteQueryClient(server.url) as client:

            def routed(key: str) -> int:
                computed = client.partition_for("s", key)
                if computed is not None:
                    return computed
                request = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(key))
                try:
                    (partition,) = client.query(request).partition_results
                except RemoteServiceError as error:
                    raise ValueError(error.message.removeprefix("ValueError: ")) from None
                return partition

            client_side = outcome(routed, keys)
    finally:
        server.stop()
    return {"http service": service, "routing client": client_side}


def expected(partitions: int, shape: str | None, keys: Sequence[str]) -> list[int]:
    """The accepted partitions: 0 in a store of one partition (the partitioner is not
    asked), Kafka's default partitioner without one, else the partitioner's number."""
    if partitions == 1:
        return [0] * len(keys)
    if shape is None:
        return [partition_for_bytes(key.encode(), partitions) for key in keys]
    return [ShapedPartitioner.number(key, partitions) for key in keys]


@given(
    st.integers(1, 6),
    st.sampled_from([None, *ACCEPTED, *REFUSED]),
    st.lists(TEXT, min_size=1, max_size=12, unique=True),
)
def test_every_component_partitions_and_refuses_alike(
    partitions: int, shape: str | None, keys: list[str]
) -> None:
    chosen = partitions_by_component(partitions, partitioner_of(shape), keys)
    first, *_ = chosen.values()
    assert all(answer == first for answer in chosen.values()), chosen
    if shape in REFUSED and partitions > 1:
        answer = ShapedPartitioner(shape)(keys[0], partitions)
        assert isinstance(first, str), chosen
        assert first.startswith("ValueError: the partitioner of store 's' ")
        assert repr(answer) in first, "the error names what the partitioner returned"
    else:
        assert first == expected(partitions, shape, keys)


def test_the_jvm_write_path_partitions_as_every_other_component(spark: Any) -> None:
    """Where Spark's Kafka sink writes a store (Kafka's default partitioning), the Java
    producer's partition for the key bytes Spark's expressions make is the store's: one
    Spark job makes the keys of every such store."""
    keys = [
        f"{word}{i}"
        for i, word in enumerate(["spark", "Zürich", "日本語", "🙂", "", "a\x00b"] * 40)
    ]
    frame = spark.createDataFrame([(key, 1) for key in keys], "k string, v long")
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    columns = RowColumns.of("s", "k", "v", None, None)
    taken: dict[tuple[int, str | None], Any] = {}
    for partitions in (1, 2, 3, 7):
        for shape in (None, *ACCEPTED, *REFUSED):
            store = ClusterStores(KafkaCluster("127.0.0.1:9"), "jvm").key_value_store(
                "s", partitions, partitioner=partitioner_of(shape)
            )
            records = spark_records(store, columns, types)
            if isinstance(records, SparkRecords):
                taken[partitions, shape] = records.columns(0)[0]
    assert set(taken) == {(1, shape) for shape in (None, *ACCEPTED, *REFUSED)} | {
        (n, None) for n in (2, 3, 7)
    }, "the JVM path writes every store whose rule is Kafka's default partitioning"
    made = frame.select(*(key.alias(f"key{i}") for i, key in enumerate(taken.values()))).collect()
    # The partition the sink's Java producer picks for a keyed record (kafka-clients itself).
    java = spark.sparkContext._jvm.org.apache.kafka.clients.producer.internals.BuiltInPartitioner
    for i, (partitions, shape) in enumerate(taken):
        jvm = [java.partitionForKey(bytes(row[f"key{i}"]), partitions) for row in made]
        chosen = partitions_by_component(partitions, partitioner_of(shape), keys)
        assert all(answer == jvm for answer in chosen.values()), (partitions, shape)
