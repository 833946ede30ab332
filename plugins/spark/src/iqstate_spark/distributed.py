"""The distributed sink: each micro-batch written to the changelogs by Spark's executors.

    stores = ClusterStores(KafkaCluster("broker:9092"), "word-app")
    stores.key_value_store("word-counts", 4)
    df.writeStream.foreachBatch(iqstate_spark.to_store(stores, "word-counts", key="word"))

Per micro-batch, on the driver (`foreachBatch` runs there) and without any row passing
through it:
1. the batch's position is read from the query's checkpoint (`offsets/<batchId>`, written
   by Spark before the batch runs: for a Kafka source, exactly the batch's end offsets);
2. one Spark job writes the batch's records, with the batch id in every record, from the
   executors, and ends only once they are durable (acknowledged by `acks=all`), by one of two
   write paths chosen once per schema:
   - **Spark's Kafka sink**, when Spark's own expressions make every record byte for byte
     (`iqstate_spark.spark_records`: built-in serdes on matching column types, Kafka's
     default partitioning) and the session has Spark's Kafka connector: the rows never
     leave the executors' JVMs;
   - **a producer in each task** otherwise (`iqstate_spark.executor_write`, `mapInArrow`):
     the store's own serdes and partitioner in the executors' Python workers;
3. only after every task succeeded, the driver writes one batch marker per changelog
   partition (batch id and position) and waits until they are durable;
4. `foreachBatch` returns, and Spark commits the micro-batch.

A crash anywhere before step 4 makes Spark run the batch again with the same id and
offsets: records of the failed attempt sit before the replay's markers and are overwritten
by it, and a batch whose markers already landed is skipped by every replica (its id is at
or below their fence), so each batch is applied exactly once. Both paths use idempotent
producers with `acks=all`; a record that cannot be delivered fails its task, and Spark
retries it (duplicates are harmless for the same reason).

Why both: measured in bench/spark_distributed.py and docs/spark.md. Rows that reach a
Python worker pay the Arrow transfer and a Python call per row, which caps the producer in
the task well below Spark's plain Kafka sink; the JVM path writes at the sink's own speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from iqstate_kafka.cluster import KafkaCluster
from iqstate_kafka.declarations import declare_as_writer
from iqstate_kafka.heartbeats import shape_of
from iqstate_kafka.topics import EndOffsets, changelog_topic, ensure_changelog_topics
from iqstate_kafka.writer import BatchWriter

from iqstate.errors import BatchGapError, IqstateError
from iqstate_spark.cluster_stores import ClusterStores
from iqstate_spark.executor_write import RESULT_SCHEMA, PartitionWrite
from iqstate_spark.offsets import running_batch_position
from iqstate_spark.sink_arguments import OutputMode, check_sink_arguments
from iqstate_spark.spark_records import SparkRecords, spark_records
from iqstate_spark.stopping import interrupted_by_stop

WritePath = Literal["spark-kafka-sink", "python-producer"]

SHARED_CLIENT_SETTINGS = frozenset({"client.id"})
"""`client_config` settings that mean the same to librdkafka and to the Java producer of
Spark's Kafka sink; any other setting (SSL, SASL and the like are named differently there)
keeps the batch on the Python producers, which read `client_config` as it is."""


class ClusterSink:
    """The callable `to_store(ClusterStores, ...)` returns, for `foreachBatch`."""

    def __init__(
        self,
        target: ClusterStores,
        store: str,
        key: str,
        value: str | Sequence[str] | None,
        window: str | None,
        tombstone: str | None,
        output_mode: OutputMode,
        checkpoint: str | Path | None,
        source_names: Sequence[str] | None,
        *,
        timestamp: str | None = None,
        session: str | None = None,
        write_path: Literal["auto", "python-producer"] = "auto",
        delivery_timeout: float = 30.0,
        allow_gaps: bool = False,
    ) -> None:
        declared = target.stores.get(store)
        checked = check_sink_arguments(
            store=store,
            store_type=None if declared is None else declared.store_type,
            declared=target.stores.keys(),
            declared_by=f"application {target.application_id!r}",
            declared_where=" on this cluster",
            key=key,
            value=value,
            window=window,
            tombstone=tombstone,
            timestamp=timestamp,
            session=session,
            output_mode=output_mode,
            modes=("append", "update"),
            modes_where=" in distributed mode",
            modes_why=(
                " (complete mode deletes the keys a batch lacks, which needs the store's "
                "contents on the writer)"
            ),
            checkpoint=checkpoint,
            source_names=source_names,
        )
        assert declared is not None  # checked
        self.target, self.store = target, declared
        self.columns = checked.columns
        self.checkpoint, self.source_names = checked.checkpoint, checked.source_names
        self._stores = {declared.name: declared.partitions}
        ensure_changelog_topics(target.cluster, target.application_id, self._stores)
        # Values of another serde would fail every read of them on the serving instances.
        shape = shape_of(
            declared.store_type, declared.key_serde, declared.value_serde, declared.partitioner
        )
        declare_as_writer(target.cluster, target.application_id, {declared.name: shape})
        self._topic = changelog_topic(target.application_id, declared.name)
        self._end_offsets = EndOffsets(target.cluster)
        self._markers = BatchWriter(
            target.cluster, target.application_id, delivery_timeout=delivery_timeout
        )
        self._allowed_paths = write_path
        self._delivery_timeout = delivery_timeout
        self._java_producer_options = _java_producer_options(target.cluster, delivery_timeout)
        self._schema: str | None = None
        self._records: SparkRecords | None = None
        self.write_path: WritePath | None = None
        """How the last micro-batch was written (None before the first)."""
        self.write_path_reason = ""
        """Why the Python producers write, when they do."""
        self.last_batch: tuple[int, int] | None = None
        """`(batch_id, records)` of the last micro-batch written, for progress reports."""
        self.batches_written = 0
        """Micro-batches this sink wrote (a replay of one counts again)."""
        self._history_checked = allow_gaps
        """Whether the changelog is known to hold the query's batches before the first
        this sink writes (`allow_gaps`: whether it may lack them)."""

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        if str(batch_df.sparkSession.conf.get("spark.speculation", "false")).lower() == "true":
            raise IqstateError(
                "to_store in distributed mode needs spark.speculation off: a speculative copy "
                "of a task still writing after the batch's markers would change the next batch"
            )
        position = running_batch_position(batch_df, batch_id, self.checkpoint, self.source_names)
        self.columns.check(batch_df.columns)
        if not self._history_checked:
            self._check_history(batch_id)
        self._choose_write_path(batch_df)
        with interrupted_by_stop(batch_df, self.store.name, batch_id):
            if self._records is not None:
                written = self._write_with_spark_sink(batch_df, self._records, batch_id)
            else:
                written = self._write_with_producers(batch_df, batch_id)
        self._markers.write({}, batch_id=batch_id, position=position, stores=self._stores)
        self.last_batch = (batch_id, written)
        self.batches_written += 1

    def _check_history(self, batch_id: int) -> None:
        """Refuse a first batch after 0 on a changelog that holds no batch: the query's
        earlier batches are in no changelog (the topic was deleted and made again, or the
        application id changed), and every replica would serve the store without them,
        saying nothing (a replica takes the first batch it finds; compaction removes old
        markers, so it cannot tell). Embedded stores make the same check."""
        if batch_id > 0:
            ends = self._end_offsets.of(self._topic, self.store.partitions, self._delivery_timeout)
            if not any(ends):
                raise BatchGapError(
                    f"to_store({self.store.name!r}): the query's checkpoint is at batch "
                    f"{batch_id}, but changelog topic {self._topic!r} holds no batch (it was "
                    "deleted, or the application id changed): batches 0.."
                    f"{batch_id - 1} would be missing from every replica. Run the query "
                    "from a new checkpoint (it reads its source again from the start), or "
                    f"pass allow_gaps=True to serve the store from batch {batch_id} on"
                )
        self._history_checked = True

    def _choose_write_path(self, batch_df: Any) -> None:
        """Decide once per schema (a streaming query's stays the same) how batches are
        written; first refuse a column of times or tombstones of the wrong type, before any
        task writes (on the schema's empty Arrow table: `limit(0)` runs no job)."""
        schema = batch_df.schema
        described = schema.json()
        if described == self._schema:
            return
        if self.columns.checks_types:
            self.columns.check_types(batch_df.limit(0).toArrow())
        records: SparkRecords | str
        if self._allowed_paths == "python-producer":
            records = "the sink was made with write_path='python-producer'"
        elif not _has_kafka_connector(batch_df.sparkSession):
            records = "the Spark session has no Kafka connector (spark-sql-kafka-0-10)"
        elif unshared := sorted(set(self.target.cluster.client_config) - SHARED_CLIENT_SETTINGS):
            records = (
                f"client_config sets {', '.join(unshared)}, which Spark's Java producer "
                "names differently"
            )
        else:
            types = {f.name: f.dataType.simpleString() for f in schema.fields}
            records = spark_records(self.store, self.columns, types)
        self._schema = described
        if isinstance(records, SparkRecords):
            self._records, self.write_path, self.write_path_reason = records, "spark-kafka-sink", ""
        else:
            self._records, self.write_path, self.write_path_reason = (
                None,
                "python-producer",
                records,
            )

    def _write_with_spark_sink(self, batch_df: Any, records: SparkRecords, batch_id: int) -> int:
        """Spark's Kafka sink writes the records; returns how many records the changelog
        gained (Spark's sink reports no count: the end offsets before and after tell it, and
        count a retried task's duplicates too, which the replicas overwrite). A broker that
        restarts keeps the batch waiting as long as its writes would wait for it (the
        delivery timeout), not failing the streaming query."""
        before = self._end_offsets.of(self._topic, self.store.partitions, self._delivery_timeout)
        writer = (
            batch_df.select(*records.columns(batch_id))
            .write.format("kafka")
            .option("topic", self._topic)
        )
        for name, value in self._java_producer_options.items():
            writer = writer.option(f"kafka.{name}", value)
        writer.save()
        after = self._end_offsets.of(self._topic, self.store.partitions, self._delivery_timeout)
        return sum(after) - sum(before)

    def _write_with_producers(self, batch_df: Any, batch_id: int) -> int:
        task = PartitionWrite.of(
            self.target.cluster,
            self.target.application_id,
            self.store,
            self.columns,
            batch_id,
            self._delivery_timeout,
        )
        counts = batch_df.mapInArrow(task, RESULT_SCHEMA).collect()
        return sum(int(row["records"]) for row in counts)

    def close(self) -> None:
        """Release the driver's producer (the markers')."""
        self._markers.close()


def _has_kafka_connector(session: Any) -> bool:
    """Whether `session` can write with `format("kafka")`: Spark's own data source lookup,
    through PySpark's gateway to the driver's JVM (the connector may come from
    `spark.jars`, `spark.jars.packages` or the installation's own jars)."""
    try:
        jvm = session._jvm
        lookup = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource
        lookup("kafka", session._jsparkSession.sessionState().conf())
    except Exception:  # no JVM here (Spark Connect), or DATA_SOURCE_NOT_FOUND
        return False
    return True


def _java_producer_options(cluster: KafkaCluster, delivery_timeout: float) -> dict[str, str]:
    """The Java producer settings of Spark's Kafka sink: those of iqstate's own producers
    (idempotent, `acks=all`, delivery bounded by `delivery_timeout`)."""
    delivery_ms = max(2, round(delivery_timeout * 1000))
    linger_ms = 5
    options = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "enable.idempotence": "true",
        "acks": "all",
        "linger.ms": str(linger_ms),
        "delivery.timeout.ms": str(delivery_ms),
        # The Java producer insists on delivery.timeout.ms >= linger.ms + request.timeout.ms.
        "request.timeout.ms": str(max(1, min(30_000, delivery_ms - linger_ms))),
        "max.block.ms": str(delivery_ms),
    }
    options.update(
        {
            name: str(cluster.client_config[name])
            for name in SHARED_CLIENT_SETTINGS
            if name in cluster.client_config
        }
    )
    return options
