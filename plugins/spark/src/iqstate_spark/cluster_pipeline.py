"""The distributed word-count pipeline: a Kafka topic of words into two stores' changelogs.

Spark's own Kafka source reads the input topic (one word per record, the record's timestamp
as event time); two streaming queries write, from Spark's executors, to the changelogs of

* `word-counts` (key-value: word -> count, `groupBy(word).count()`, update mode);
* `words-per-minute` (window store of one-minute windows: word -> count in the minute).

Each micro-batch's position is the input topic's offsets it ended at. Serving instances
declare the same stores (`serve_store_options()` gives the `iqstate serve --store` values).
`iqstate demo --cluster` runs it; so does `python -m iqstate_spark.cluster_pipeline` (the
driver on its own, which tests kill and restart), printing one line per batch:
`batch <store> <batch id> <records>`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from iqstate_kafka.cluster import KafkaCluster

from iqstate_spark.cluster_stores import ClusterStores

COUNTS = "word-counts"
WINDOWS = "words-per-minute"
WINDOW_MS = 60_000
RETENTION_MS = 7 * 24 * 3600 * 1000
COUNTS_PARTITIONS = 4
WINDOWS_PARTITIONS = 2


def declare(cluster: KafkaCluster, application_id: str) -> ClusterStores:
    """The pipeline's two stores on `cluster` (default serdes: string keys, JSON counts)."""
    stores = ClusterStores(cluster, application_id)
    stores.key_value_store(COUNTS, COUNTS_PARTITIONS)
    stores.window_store(WINDOWS, WINDOWS_PARTITIONS)
    return stores


def serve_store_options(engine: str = "memory") -> list[str]:
    """The `--store` values of `iqstate serve --cluster` for the pipeline's stores."""
    return [
        f"{COUNTS}:key_value:{COUNTS_PARTITIONS},engine={engine}",
        f"{WINDOWS}:window:{WINDOWS_PARTITIONS},window_size_ms={WINDOW_MS},"
        f"retention_ms={RETENTION_MS},engine={engine}",
    ]


def start(
    spark: Any,
    stores: ClusterStores,
    input_topic: str,
    checkpoints: Path,
    *,
    trigger_seconds: float = 0.5,
    max_offsets_per_trigger: int | None = None,
) -> tuple[list[Any], list[Any]]:
    """Start both streaming queries; returns `(queries, sinks)` (a sink's `last_batch`
    says what it wrote last)."""
    from pyspark.sql import functions as F

    from iqstate_spark.sink import to_store

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", stores.cluster.bootstrap_servers)
        .option("subscribe", input_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    events = reader.load().select(
        F.col("value").cast("string").alias("word"), F.col("timestamp").alias("ts")
    )
    outputs = {
        COUNTS: events.groupBy("word").count(),
        WINDOWS: events.groupBy(F.window("ts", f"{WINDOW_MS // 1000} seconds"), "word").count(),
    }
    queries, sinks = [], []
    for store, frame in outputs.items():
        checkpoint = checkpoints / store
        sink = to_store(stores, store, key="word", value="count", checkpoint=checkpoint)
        query = (
            frame.writeStream.outputMode("update")
            .queryName(store)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{trigger_seconds} seconds")
            .foreachBatch(sink)
            .start()
        )
        queries.append(query)
        sinks.append(sink)
    return queries, sinks


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline's driver until SIGTERM or Ctrl-C (see the module docstring)."""
    from iqstate_spark.running import StopSignals
    from iqstate_spark.session import cluster_session

    parser = argparse.ArgumentParser(prog="python -m iqstate_spark.cluster_pipeline")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--input-topic", required=True)
    parser.add_argument("--checkpoints", required=True, type=Path)
    parser.add_argument("--executors", type=int, default=2)
    parser.add_argument("--trigger-seconds", type=float, default=0.5)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    args = parser.parse_args(argv)
    stores = declare(KafkaCluster(args.bootstrap_servers), args.app_id)
    spark = cluster_session(f"iqstate-{args.app_id}", executors=args.executors)
    with StopSignals() as signals:
        queries, sinks = start(
            spark,
            stores,
            args.input_topic,
            args.checkpoints,
            trigger_seconds=args.trigger_seconds,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
        )
        print("started", flush=True)
        reported: dict[str, Any] = {}
        try:
            while not signals.requested.is_set():
                for query, sink in zip(queries, sinks, strict=True):
                    if query.exception() is not None:
                        print(f"failed {sink.store.name}: {query.exception()}", flush=True)
                        return 1
                    if (
                        sink.last_batch is not None
                        and reported.get(sink.store.name) != sink.last_batch
                    ):
                        reported[sink.store.name] = sink.last_batch
                        batch_id, records = sink.last_batch
                        print(f"batch {sink.store.name} {batch_id} {records}", flush=True)
                signals.requested.wait(0.1)
        finally:
            for query in queries:
                query.stop()
            for sink in sinks:
                sink.close()
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
