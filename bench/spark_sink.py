"""The iqstate sink's cost per micro-batch, and how soon an event is queryable.

Two runs of the same streaming word count (one input file per micro-batch, the demo's
corpus) in one Spark session:

* baseline: `foreachBatch` that collects the batch to Arrow and drops it;
* iqstate: `foreachBatch(iqstate_spark.to_store(...))` into a RocksDB store.

The per-batch time is Spark's `triggerExecution` duration, averaged over the batches after
the first, after a discarded warm-up run (the JVM speeds up a lot over its first minute).
Then event-to-queryable latency: a file with a fresh word is dropped into the
inbox while the iqstate query runs, and `app.query` is polled until it answers the word.

    python bench/spark_sink.py [--files 20] [--lines 2000] [--probes 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import iqstate_spark
from iqstate_spark.demo import corpus_file
from iqstate_spark.session import local_session
from pyspark.sql import functions as F

from iqstate import Application, KeyQuery, StateQueryRequest


def word_counts(spark: Any, inbox: Path) -> Any:
    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(inbox))
    words = lines.select(F.explode(F.slice(F.split("value", " "), 3, 100)).alias("word"))
    return words.groupBy("word").count()


def run(spark: Any, inbox: Path, checkpoint: Path, sink: Any) -> list[float]:
    query = (
        word_counts(spark, inbox).writeStream.outputMode("update")
        .option("checkpointLocation", str(checkpoint)).foreachBatch(sink).start()
    )  # fmt: skip
    query.processAllAvailable()
    durations = [
        p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"]
    ]
    query.stop()
    return durations[1:]


def drop(batch_df: Any, batch_id: int) -> None:
    batch_df.toArrow()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--probes", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="iqstate-bench-spark-"))
    inbox = root / "inbox"
    inbox.mkdir()
    for index in range(args.files):
        (inbox / f"words-{index:06d}.txt").write_text(corpus_file(index, args.lines, seed=3))
    spark = local_session("iqstate-bench")

    run(spark, inbox, root / "ckpt-warm-up", drop)  # JIT and caches warm for both runs
    baseline = run(spark, inbox, root / "ckpt-baseline", drop)
    app = Application("bench", root / "state", processing_guarantee="at_least_once")
    app.key_value_store("counts", 4, engine="rocksdb", value_serde="int64")
    app.start()
    sink = iqstate_spark.to_store(app, "counts", key="word", value="count")
    with_iqstate = run(spark, inbox, root / "ckpt-iqstate", sink)

    query = (
        word_counts(spark, inbox).writeStream.outputMode("update")
        .option("checkpointLocation", str(root / "ckpt-iqstate")).foreachBatch(sink)
        .trigger(processingTime="100 milliseconds").start()
    )  # fmt: skip
    latencies = []
    for probe in range(args.probes):
        word = f"probe{probe}"
        staged = root / f"{word}.txt"
        staged.write_text(f"2026-11-22 10:00:00 {word}\n")
        request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(word))
        start = time.perf_counter()
        os.replace(staged, inbox / f"zz-{word}.txt")
        while app.query(request).only_partition_result() is None:
            time.sleep(0.005)
        latencies.append(time.perf_counter() - start)
    query.stop()
    app.close()
    spark.stop()

    base, mine = statistics.mean(baseline), statistics.mean(with_iqstate)
    print(f"{args.files} files x {args.lines} lines, one file per micro-batch, local[2]")
    print(
        f"per-batch time: collect-and-drop {base:.0f} ms, iqstate sink {mine:.0f} ms, "
        f"ratio {mine / base:.2f} (+{(mine / base - 1) * 100:.0f}%)"
    )
    print(
        f"event-to-queryable: median {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms over {len(latencies)} probes"
    )


if __name__ == "__main__":
    main()
