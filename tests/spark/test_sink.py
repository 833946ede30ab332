"""The foreachBatch sink: positions from Spark's offsets, output modes, windows, deletes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from iqstate_spark import batch_position, to_store

from iqstate import (
    Application,
    CorruptStateError,
    Position,
    RangeQuery,
    StateQueryRequest,
    WindowRangeQuery,
)


def everything(app: Application, store: str, query: Any = None) -> tuple[dict[Any, Any], Position]:
    result = app.query(
        StateQueryRequest.in_store(store).with_query(query or RangeQuery.with_no_bounds())
    )
    found: dict[Any, Any] = {}
    for partition_result in result.partition_results.values():
        found.update(partition_result.result)
    return found, result.position


def write_offsets(checkpoint: Path, batch: int, *sources: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(["v1", "{}", *sources]) + "\n")


def test_batch_position_from_offsets_files(tmp_path: Path) -> None:
    write_offsets(
        tmp_path, 3, '{"logOffset":12}', "-", json.dumps({"words": {"0": 41, "1": 17}}), "99"
    )
    position = batch_position(tmp_path, 3, ["files"])
    assert position == Position.from_map(
        {"files": {0: 12}, "words": {0: 41, 1: 17}, "spark-source-3": {0: 99}}
    )
    with pytest.raises(CorruptStateError, match="no offsets for batch 4"):
        batch_position(tmp_path, 4)
    write_offsets(tmp_path, 5, '"text"')
    with pytest.raises(CorruptStateError, match="unsupported offset"):
        batch_position(tmp_path, 5)


@pytest.fixture
def words(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    return folder


def word_counts(spark: Any, folder: Path) -> Any:
    from pyspark.sql import functions as F

    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(folder))
    return lines.select(F.explode(F.split("value", " ")).alias("word")).groupBy("word").count()


@pytest.mark.iqstate_slow
@pytest.mark.parametrize("mode", ["update", "complete"])
def test_aggregation_into_a_key_value_store(
    spark: Any, tmp_path: Path, words: Path, mode: str
) -> None:
    (words / "1.txt").write_text("spark kafka spark\n")
    (words / "2.txt").write_text("spark flink\n")
    app = Application("wc", tmp_path / "state")
    app.key_value_store("counts", 3, engine="rocksdb", value_serde="int64")
    with app:
        sink = to_store(app, "counts", key="word", value="count", output_mode=mode)  # type: ignore[arg-type]
        query = (
            word_counts(spark, words)
            .writeStream.outputMode(mode)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .foreachBatch(sink)
            .start()
        )
        query.processAllAvailable()
        query.stop()
        counts, position = everything(app, "counts")
        assert counts == {"spark": 3, "kafka": 1, "flink": 1}
        assert position == Position.from_map({"spark-source-0": {0: 1}}), (
            "file log offset of batch 1"
        )
        assert sink.last_batch == (1, 2 if mode == "update" else 3)


@pytest.mark.iqstate_slow
def test_append_mode_with_deletes_and_dict_values(spark: Any, tmp_path: Path, words: Path) -> None:
    from pyspark.sql import functions as F

    (words / "1.txt").write_text("put a 1\nput b 2\n")
    (words / "2.txt").write_text("del a 0\nput c 3\n")
    app = Application("ops", tmp_path / "state")
    app.key_value_store("kv", 2)
    with app:
        parts = F.split("value", " ")
        rows = (
            spark.readStream.option("maxFilesPerTrigger", 1)
            .text(str(words))
            .select(
                parts[1].alias("key"),
                parts[2].cast("int").alias("n"),
                (parts[0] == "del").alias("gone"),
            )
        )
        query = (
            rows.writeStream.outputMode("append")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .foreachBatch(to_store(app, "kv", key="key", value=["n"], tombstone="gone"))
            .start()
        )
        query.processAllAvailable()
        query.stop()
        values, _ = everything(app, "kv")
        assert values == {"b": {"n": 2}, "c": {"n": 3}}


@pytest.mark.iqstate_slow
def test_windowed_counts_into_a_window_store(spark: Any, tmp_path: Path, words: Path) -> None:
    from pyspark.sql import functions as F

    (words / "1.txt").write_text(
        "2026-11-22 10:00:05 spark\n2026-11-22 10:00:50 spark\n2026-11-22 10:01:10 kafka\n"
    )
    app = Application("win", tmp_path / "state")
    app.window_store("per-minute", 2, 60_000, 86_400_000, engine="rocksdb", value_serde="int64")
    with app:
        parts = F.split("value", " ")
        events = spark.readStream.text(str(words)).select(
            F.to_timestamp(F.concat_ws(" ", parts[0], parts[1])).alias("ts"), parts[2].alias("word")
        )
        counts = events.groupBy(F.window("ts", "1 minute"), "word").count()
        query = (
            counts.writeStream.outputMode("update")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .foreachBatch(to_store(app, "per-minute", key="word", value="count"))
            .start()
        )
        query.processAllAvailable()
        query.stop()
        found, _ = everything(app, "per-minute", WindowRangeQuery.with_window_start_range(0, 2**62))
        minutes = {(w.key, w.end_ms - w.start_ms): v for w, v in found.items()}
        assert minutes == {("spark", 60_000): 2, ("kafka", 60_000): 1}
        spark_count = app.query(
            StateQueryRequest.in_store("per-minute").with_query(
                WindowRangeQuery.with_window_start_range(0, 2**62)
            )
        )
        assert spark_count.position == Position.from_map({"spark-source-0": {0: 0}})
        # Windows of another size than the store's are refused, naming both sizes.
        rows = spark.createDataFrame([("2026-11-22 10:00:05", "spark")], "ts string, word string")
        ten_seconds = rows.groupBy(F.window(F.to_timestamp("ts"), "10 seconds"), "word").count()
        sink = to_store(app, "per-minute", key="word", value="count", checkpoint=tmp_path / "ck")
        with pytest.raises(
            Exception, match="window lasts 10000 ms .* the store's windows are 60000"
        ):
            sink(ten_seconds, 0)


def test_sink_arguments_are_checked(tmp_path: Path) -> None:
    app = Application("x", tmp_path)
    app.key_value_store("kv", 1)
    app.window_store("w", 1, 10, 100)
    with pytest.raises(Exception, match="no store 'nope'"):
        to_store(app, "nope", key="k")
    with pytest.raises(ValueError, match="output_mode"):
        to_store(app, "kv", key="k", output_mode="merge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window= does not apply"):
        to_store(app, "kv", key="k", window="w")
    with pytest.raises(ValueError, match="complete mode"):
        to_store(app, "w", key="k", output_mode="complete")
    with pytest.raises(ValueError, match=r"source_names must be a list of strings.*'orders'"):
        to_store(app, "kv", key="k", source_names="orders")
    with pytest.raises(Exception, match="hdfs://nn/ck is not on the local file system"):
        to_store(app, "kv", key="k", checkpoint="hdfs://nn/ck")
    url = (tmp_path / "my checkpoint").as_uri()  # file:///.../my%20checkpoint
    made = to_store(app, "kv", key="k", checkpoint=url)
    assert made.checkpoint == tmp_path / "my checkpoint"  # type: ignore[union-attr]


@pytest.mark.iqstate_slow
def test_a_query_stopped_mid_batch_stops_cleanly_and_reruns_the_batch(
    spark: Any, tmp_path: Path, words: Path
) -> None:
    """`query.stop()` during a batch's Spark job: the query ends "Stopped" with no error
    (before, Spark's stream thread died of a StackOverflowError matching the job's long
    cancellation text), nothing of the batch lands, and a restart writes it once."""
    from pyspark.sql import functions as F

    running, slow = tmp_path / "running", tmp_path / "slow"
    slow.touch()

    def pause(word):  # type: ignore[no-untyped-def]  # hints would make Spark guess a pandas UDF
        import time

        running.touch()
        while slow.exists():
            time.sleep(0.05)
        return word

    (words / "1.txt").write_text("spark kafka spark\n")
    app = Application("stops", tmp_path / "state")
    app.key_value_store("counts", 2, value_serde="int64")

    def start() -> Any:
        paused = F.udf(pause, "string")
        counts = word_counts(spark, words).select(paused("word").alias("word"), "count")
        return (
            counts.writeStream.outputMode("update")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .foreachBatch(to_store(app, "counts", key="word", value="count"))
            .start()
        )

    with app:
        query = start()
        deadline = time.monotonic() + 120
        while not running.exists():
            assert time.monotonic() < deadline, "the batch's job never started"
            time.sleep(0.05)
        query.stop()
        assert query.exception() is None
        assert query.status["message"] == "Stopped"
        assert everything(app, "counts") == ({}, Position.empty())

        slow.unlink()
        query = start()
        query.processAllAvailable()
        query.stop()
        assert everything(app, "counts") == (
            {"spark": 2, "kafka": 1},
            Position.from_map({"spark-source-0": {0: 0}}),
        )


def test_only_a_stop_becomes_query_stopped(spark: Any, tmp_path: Path) -> None:
    """An error that merely looks like a stop (it names the job group, a cancellation and an
    interruption) while the query is still active fails the query with that very error."""
    from iqstate_spark.stopping import QueryStopped, interrupted_by_stop
    from pyspark.errors import StreamingQueryException

    with pytest.raises(ValueError, match="boom"), interrupted_by_stop(None, "s", 0):
        raise ValueError("boom")  # nothing like a stop: not even looked into

    def failing(batch_df: Any, batch_id: int) -> None:
        with interrupted_by_stop(batch_df, "s", batch_id):
            group = batch_df.sparkSession.sparkContext.getLocalProperty("spark.jobGroup.id")
            raise RuntimeError(
                f"Job 7 cancelled part of job group {group}: java.lang.InterruptedException"
            )

    query = (
        spark.readStream.format("rate")
        .load()
        .writeStream.option("checkpointLocation", str(tmp_path / "ckpt"))
        .foreachBatch(failing)
        .start()
    )
    with pytest.raises(StreamingQueryException) as failed:
        query.awaitTermination(120)
    assert "Job 7 cancelled" in str(failed.value)
    assert QueryStopped.__name__ not in str(failed.value)


def test_a_store_without_the_querys_earlier_batches_refuses_its_next_one(
    spark: Any, tmp_path: Path
) -> None:
    """The query's checkpoint is at batch 6, the stores are in memory and came back empty
    (a restarted driver): the batch is refused, naming what is missing, where it used to
    leave the store with only batch 6's keys at batch 6's position. Complete mode (each
    batch is the whole result) and `allow_gaps=True` take it."""
    from iqstate import BatchGapError

    checkpoint = tmp_path / "checkpoint"
    write_offsets(checkpoint, 6, '{"logOffset":6}')
    app = Application("x", tmp_path / "state")
    for name in ("kv", "complete", "accepting"):
        app.key_value_store(name, 2, value_serde="int64")
    frame = spark.createDataFrame([("a", 1), ("b", 2)], "k string, n long")
    with app:
        sink = to_store(
            app, "kv", key="k", value="n", checkpoint=checkpoint, source_names=["files"]
        )
        gap = r"'kv' partition 0 \(holding nothing, missing 0..5\)"
        with pytest.raises(BatchGapError, match=gap):
            sink(frame, 6)
        assert sink.last_batch is None and everything(app, "kv")[0] == {}, "nothing written"
        for name, options in (
            ("complete", {"output_mode": "complete"}),
            ("accepting", {"allow_gaps": True}),
        ):
            to_store(
                app,
                name,
                key="k",
                value="n",
                checkpoint=checkpoint,
                source_names=["files"],
                **options,
            )(frame, 6)
            assert everything(app, name) == ({"a": 1, "b": 2}, Position.from_map({"files": {0: 6}}))


def test_null_keys_are_refused_and_map_values_stored_as_objects(spark: Any, tmp_path: Path) -> None:
    """A null key would be stored under `null`, which no lookup can ask for; a map column
    is the JSON object it reads as, not a list of pairs."""
    checkpoint = tmp_path / "checkpoint"
    write_offsets(checkpoint, 0, '{"logOffset":0}')
    app = Application("x", tmp_path / "state")
    app.key_value_store("kv", 2)
    with app:
        sink = to_store(app, "kv", key="k", value="m", checkpoint=checkpoint)
        rows = spark.createDataFrame(
            [("a", {"x": 1}), (None, {"y": 2})], "k string, m map<string, int>"
        )
        with pytest.raises(Exception, match=r"a row has a null key \(column 'k'\)"):
            sink(rows, 0)
        assert everything(app, "kv")[0] == {}, "nothing written"
        sink(rows.where("k IS NOT NULL"), 0)
        assert everything(app, "kv")[0] == {"a": {"x": 1}}
