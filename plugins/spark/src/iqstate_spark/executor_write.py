"""What each Spark task runs in distributed mode: its rows, as changelog records, to Kafka.

`PartitionWrite` is the function given to `DataFrame.mapInArrow`: Spark pickles it, ships it
to the executors, and calls it with the Arrow record batches of one partition of the
micro-batch. It serializes each row with the store's serdes, makes its changelog entry in
the core's encoding for the store's type (the store's `entry_of`: a window start, a
timestamp, a version or a session in the key or value, as the serving instances restore
them), groups the rows by store partition (`entries_by_partition`) by the rule the serving
instances follow (the store's `partition_of`: its partitioner, else Kafka's murmur2 of the
serialized key, always of the key alone), and produces the records with
`BatchWriter.write_data` (idempotent producer, `acks=all`, the batch id in every record's
header). It returns only once every record is acknowledged, with one row: how
many records it wrote. A failure fails the task; Spark retries it (duplicates are harmless:
the batch's records are applied at its markers, the driver writes the markers only after
every task has succeeded).

It carries plain values only (no `KafkaCluster`: its settings are rebuilt on the executor),
so it pickles anywhere and relies on nothing of the driver's process or files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from iqstate_kafka.cluster import KafkaCluster
from iqstate_kafka.writer import BatchWriter, Entry

from iqstate.errors import IqstateError
from iqstate_spark.cluster_stores import ChangelogStore
from iqstate_spark.rows import RowColumns

RESULT_SCHEMA = "records long"
"""The one row each task returns (the schema string `mapInArrow` needs)."""


@dataclass(frozen=True)
class PartitionWrite:
    """Writes the rows of one Spark partition of batch `batch_id` to `store`'s changelog."""

    bootstrap_servers: str
    client_config: dict[str, Any]
    timeout: float
    application_id: str
    store: ChangelogStore
    columns: RowColumns
    batch_id: int
    delivery_timeout: float = field(default=30.0)

    @classmethod
    def of(
        cls,
        cluster: KafkaCluster,
        application_id: str,
        store: ChangelogStore,
        columns: RowColumns,
        batch_id: int,
        delivery_timeout: float = 30.0,
    ) -> PartitionWrite:
        return cls(
            cluster.bootstrap_servers,
            dict(cluster.client_config),
            cluster.timeout,
            application_id,
            store,
            columns,
            batch_id,
            delivery_timeout,
        )

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        cluster = KafkaCluster(
            self.bootstrap_servers, client_config=self.client_config, timeout=self.timeout
        )
        with BatchWriter(
            cluster, self.application_id, delivery_timeout=self.delivery_timeout, data_only=True
        ) as writer:
            written = writer.write_data(
                entries_by_partition(self.store, self.columns, batches),
                batch_id=self.batch_id,
                stores={self.store.name: self.store.partitions},
            )
        yield pa.RecordBatch.from_pydict({"records": pa.array([written], pa.int64())})


def entries_by_partition(
    store: ChangelogStore, columns: RowColumns, batches: Iterable[pa.RecordBatch]
) -> Iterator[tuple[tuple[str, int], list[Entry]]]:
    """Each record batch's rows as `store`'s serialized entries, grouped by store partition
    (`((store name, partition), entries)`, as `BatchWriter.write_data` takes them)."""
    serialize_key, serialize_value = store.key_serde.serialize, store.value_serde.serialize
    partition_of = store.partition_of
    for rows in batches:
        if rows.num_rows == 0:
            continue
        columns.check(rows.schema.names)
        keys = columns.keys(rows)
        values = columns.values(rows)
        times = columns.times(rows)
        try:
            keys_bytes = list(map(serialize_key, keys))
        except Exception as exc:
            raise _unwritable(store, "key", f"column {columns.key!r}", exc) from exc
        try:
            values_bytes = [None if value is None else serialize_value(value) for value in values]
        except Exception as exc:
            raise _unwritable(store, "value", columns.describe_value(), exc) from exc
        grouped: dict[int, list[Entry]] = {p: [] for p in range(store.partitions)}
        if times is None:
            for key, key_bytes, value_bytes in zip(keys, keys_bytes, values_bytes, strict=True):
                grouped[partition_of(key, key_bytes)].append((key_bytes, value_bytes))
        else:
            entry_of = store.entry_of
            for key, key_bytes, value_bytes, time in zip(
                keys, keys_bytes, values_bytes, times, strict=True
            ):
                grouped[partition_of(key, key_bytes)].append(entry_of(key_bytes, value_bytes, time))
        for partition, entries in grouped.items():
            if entries:
                yield (store.name, partition), entries


def _unwritable(store: ChangelogStore, role: str, where: str, exc: Exception) -> IqstateError:
    """A row's key or value its serde refuses, named by store and column (the task fails
    with it, which Spark reports to the driver)."""
    return IqstateError(
        f"to_store({store.name!r}): a row's {role} ({where}) cannot be written: {exc}"
    )
