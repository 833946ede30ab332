"""The distributed sink: each micro-batch written to the changelogs by Spark's executors.

    stores = ClusterStores(KafkaCluster("broker:9092"), "word-app")
    stores.key_value_store("word-counts", 4)
    df.writeStream.foreachBatch(iqstate_spark.to_store(stores, "word-counts", key="word"))

Per micro-batch, on the driver (`foreachBatch` runs there) and without any row passing
through it:
1. the batch's position is read from the query's checkpoint (`offsets/<batchId>`, written
   by Spark before the batch runs: for a Kafka source, exactly the batch's end offsets);
2. one Spark job runs `PartitionWrite` on the executors (`mapInArrow`): every task
   serializes and partitions its rows and produces them to the changelog partitions with
   the batch id in every record, returning only once they are durable; the driver gets
   one number per task back;
3. only after every task succeeded, the driver writes one batch marker per changelog
   partition (batch id and position) and waits until they are durable;
4. `foreachBatch` returns, and Spark commits the micro-batch.

A crash anywhere before step 4 makes Spark run the batch again with the same id and
offsets: records of the failed attempt sit before the replay's markers and are overwritten
by it, and a batch whose markers already landed is skipped by every replica (its id is at
or below their fence), so each batch is applied exactly once.

Why a producer in each task rather than Spark's own Kafka sink (`format("kafka")` with a
`headers` column): see docs/spark.md and bench/spark_distributed.py. Both write from the
executors; the measured difference is that Spark's sink needs the serialized key, value,
partition and header as columns, which costs a Python UDF pass (Arrow to the Python worker
and back to the JVM) before the JVM producer sends them, while the producer in the task
serializes and sends in the one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iqstate_kafka.topics import ensure_changelog_topics
from iqstate_kafka.writer import BatchWriter

from iqstate.errors import IqstateError
from iqstate_spark.cluster_stores import ClusterStores
from iqstate_spark.executor_write import RESULT_SCHEMA, PartitionWrite
from iqstate_spark.offsets import batch_position
from iqstate_spark.rows import RowColumns
from iqstate_spark.sink import OutputMode, checkpoint_of_running_query


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
    ) -> None:
        declared = target.stores.get(store)
        if declared is None:
            raise IqstateError(
                f"to_store: application {target.application_id!r} declares no store "
                f"{store!r} on this cluster; declared: {', '.join(sorted(target.stores)) or 'none'}"
            )
        if output_mode not in ("append", "update"):
            raise ValueError(
                f"to_store: output_mode must be append or update in distributed mode, got "
                f"{output_mode!r} (complete mode deletes the keys a batch lacks, which needs "
                "the store's contents on the writer)"
            )
        if declared.store_type == "window":
            window = window or "window"
        elif window is not None:
            raise ValueError(
                f"to_store: store {store!r} is a key-value store; window= does not apply"
            )
        self.target, self.store = target, declared
        self.columns = RowColumns.of(store, key, value, window, tombstone)
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.source_names = source_names
        self._stores = {declared.name: declared.partitions}
        ensure_changelog_topics(target.cluster, target.application_id, self._stores)
        self._markers = BatchWriter(target.cluster, target.application_id)
        self.last_batch: tuple[int, int] | None = None
        """`(batch_id, records)` of the last micro-batch written, for progress reports."""

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        if str(batch_df.sparkSession.conf.get("spark.speculation", "false")).lower() == "true":
            raise IqstateError(
                "to_store in distributed mode needs spark.speculation off: a speculative copy "
                "of a task still writing after the batch's markers would change the next batch"
            )
        checkpoint = self.checkpoint or checkpoint_of_running_query(batch_df)
        position = batch_position(checkpoint, batch_id, self.source_names)
        self.columns.check(batch_df.columns)
        task = PartitionWrite.of(
            self.target.cluster, self.target.application_id, self.store, self.columns, batch_id
        )
        counts = batch_df.mapInArrow(task, RESULT_SCHEMA).collect()
        self._markers.write({}, batch_id=batch_id, position=position, stores=self._stores)
        self.last_batch = (batch_id, sum(int(row["records"]) for row in counts))

    def close(self) -> None:
        """Release the driver's producer (the markers')."""
        self._markers.close()
