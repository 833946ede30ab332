"""`iqstate demo`: a Spark streaming word count whose state you query while it runs.

A generator thread writes text files into a watched folder over time, from a corpus it
makes deterministically (seeded): each line is an event time and a few words. Two Spark
Structured Streaming queries read the folder, one file per micro-batch:

* word counts (`groupBy(word).count()`, update mode) into the RocksDB key-value store
  `word-counts`;
* per-minute counts (`groupBy(window(ts, 1 minute), word).count()`) into the RocksDB window
  store `words-per-minute`.

After each batch the demo prints IQv2 query results: a key lookup with its position, the
top words, and the busiest words of the latest minute. The two queries commit on their
own, so each progress line says which batch the per-minute store has reached (often the
one before); a last line, once both have processed every file, shows the two stores
complete. `--batches N` runs N word-count batches (N new input files) and exits;
`--duration` and `--files` also make it exit by itself; Ctrl-C or SIGTERM stops it
cleanly, sent to the command or to its whole process group (`demo_parts.supervised`).
Restarting it with the same `--dir` resumes from Spark's checkpoint and iqstate's stores,
exactly once.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from iqstate import (
    Application,
    KeyQuery,
    RangeQuery,
    StateQueryRequest,
    WindowRangeQuery,
)
from iqstate_spark.demo_parts import VOCABULARY, supervised
from iqstate_spark.offsets import committed_batches
from iqstate_spark.running import StopSignals
from iqstate_spark.sink import to_store

SOURCE = "demo-files"
EPOCH = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
SECONDS_PER_FILE = 20


def corpus_file(index: int, lines: int, seed: int) -> str:
    """Input file `index`: deterministic for a seed, so a restart writes the same text."""
    rng = random.Random(seed * 1_000_003 + index)
    weights = [1.0 / (rank + 1) for rank in range(len(VOCABULARY))]
    start = EPOCH + timedelta(seconds=index * SECONDS_PER_FILE)
    rows = []
    for line in range(lines):
        moment = start + timedelta(seconds=line * SECONDS_PER_FILE / lines)
        words = rng.choices(VOCABULARY, weights, k=rng.randint(3, 8))
        rows.append(moment.strftime("%Y-%m-%d %H:%M:%S ") + " ".join(words))
    return "\n".join(rows) + "\n"


class Generator(threading.Thread):
    """Writes input files atomically into the inbox, continuing after the last one present.

    The word-count query reads one file per micro-batch, so input files are batches: with
    `--batches N` the generator writes just enough files for N batches in this run (counting
    the files a previous run wrote but its queries did not commit), then stops writing.
    """

    MAX_BACKLOG = 2
    """Files written but not yet processed; the generator waits rather than run ahead."""

    def __init__(
        self, inbox: Path, staging: Path, args: argparse.Namespace, processed: int
    ) -> None:
        super().__init__(name="iqstate-demo-generator", daemon=True)
        self.inbox, self.staging, self.args = inbox, staging, args
        self.stopped = threading.Event()
        self.next_index = len(list(inbox.glob("words-*.txt")))
        self.processed = processed
        """Files the word-count query has processed (committed batches, then the reporter's)."""
        limits = [args.files, None if args.batches is None else processed + args.batches]
        self.last = min((limit for limit in limits if limit is not None), default=None)
        """How many files the inbox holds when the generator stops writing; None: no end."""

    @property
    def finished(self) -> bool:
        return self.last is not None and self.next_index >= self.last

    def run(self) -> None:
        while not self.stopped.is_set() and not self.finished:
            if self.next_index - self.processed >= self.MAX_BACKLOG:
                self.stopped.wait(0.05)
                continue
            name = f"words-{self.next_index:06d}.txt"
            staged = self.staging / name
            staged.write_text(corpus_file(self.next_index, self.args.lines, self.args.seed))
            os.replace(staged, self.inbox / name)
            self.next_index += 1
            self.stopped.wait(self.args.interval)


def build_app(directory: Path) -> Application:
    """The demo's application: exactly-once (the default), two RocksDB stores, no changelog.

    RocksDB commits atomically, so after a crash each store holds its last commit and is used
    as it is; Spark replays the batch it had not committed, and the batch fences make the
    replay change nothing that had landed.
    """
    app = Application("iqstate-demo", directory / "state", application_server="localhost:7070")
    app.key_value_store("word-counts", 4, engine="rocksdb", value_serde="int64")
    app.window_store(
        "words-per-minute", 4, window_size_ms=60_000, retention_ms=24 * 3_600_000,
        engine="rocksdb", value_serde="int64",
    )  # fmt: skip
    return app


def start_http(app: Application, port: int) -> Any:
    """Serve the HTTP API on 127.0.0.1 when iqstate-http is installed; None otherwise."""
    try:
        import iqstate_http
    except ImportError:
        print("HTTP API: not served (pip install ./plugins/http to query the demo over HTTP)")
        return None
    try:
        server = iqstate_http.start_background(app, port=port)
    except RuntimeError as exc:
        print(f"HTTP API: not served ({exc})")
        return None
    print(f"HTTP API: {server.url}/v1/stores/word-counts/keys/spark  ({server.url}/openapi.json)")
    return server


def spark_session() -> Any:
    from iqstate_spark.session import local_session

    return local_session("iqstate-demo", shuffle_partitions=4)


def all_pairs(app: Application, store: str, query: Any) -> list[tuple[Any, Any]]:
    result = app.query(StateQueryRequest.in_store(store).with_query(query))
    pairs: list[tuple[Any, Any]] = []
    for partition_result in result.partition_results.values():
        with partition_result.result as iterator:
            pairs.extend(iterator)
    return pairs


class Reporter:
    """Prints what IQv2 queries answer after each word-count batch, and a progress line."""

    def __init__(self, app: Application, quiet: bool) -> None:
        self.app, self.quiet = app, quiet
        self.batches = 0
        self.rows = 0
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.minute_batch: Callable[[], int | None] = lambda: None
        """The last batch the per-minute query wrote (set when the queries start)."""

    def after_batch(self, batch_id: int, rows: int) -> None:
        with self.lock:
            self.batches += 1
            self.rows += rows
            counts, windows = self._stores()
            elapsed = time.monotonic() - self.started
            print(
                f"batch {batch_id:>4} | rows {self.rows:>8,} | word-counts: {len(counts):>3} keys"
                f" | words-per-minute: {len(windows):>5} windows ({self._minute_progress()})"
                f" | {elapsed:6.1f} s",
                flush=True,
            )
            if self.quiet:
                return
            lookup = self.app.query(
                StateQueryRequest.in_store("word-counts").with_query(KeyQuery.with_key("spark"))
            )
            found = lookup.only_partition_result()
            value = found.result if found else None
            print(f"   KeyQuery('spark') = {value} at position {lookup.position.to_map()}")
            top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:5]
            print("   top words: " + ", ".join(f"{word}={count}" for word, count in top))
            if windows:
                latest = max(windowed.start_ms for windowed, _ in windows)
                minute = [(w.key, c) for w, c in windows if w.start_ms == latest]
                minute.sort(key=lambda item: (-item[1], item[0]))
                label = datetime.fromtimestamp(latest / 1000, UTC).strftime("%H:%M")
                print(f"   minute {label}: " + ", ".join(f"{w}={c}" for w, c in minute[:5]))

    def _stores(self) -> tuple[dict[Any, Any], list[tuple[Any, Any]]]:
        """Every word count, and every per-minute window with its count."""
        counts = dict(all_pairs(self.app, "word-counts", RangeQuery.with_no_bounds()))
        windows = all_pairs(
            self.app, "words-per-minute", WindowRangeQuery.with_window_start_range(0, 2**62)
        )
        return counts, windows

    def _minute_progress(self) -> str:
        minute_batch = self.minute_batch()
        return "no batch yet" if minute_batch is None else f"through batch {minute_batch}"

    def summary(self) -> None:
        """Both stores once both queries have processed every file written."""
        with self.lock:
            counts, windows = self._stores()
            print(
                f"final: word-counts {len(counts)} keys, words-per-minute {len(windows)} windows "
                f"({self._minute_progress()})",
                flush=True,
            )


def start_queries(
    spark: Any, app: Application, directory: Path, generator: Generator, reporter: Reporter
) -> list[Any]:
    """The word-count and per-minute streaming queries over the inbox, one file per batch."""
    from pyspark.sql import functions as F

    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(directory / "inbox"))
    parts = F.split("value", " ")
    events = lines.select(
        F.to_timestamp(F.concat_ws(" ", parts[0], parts[1])).alias("ts"),
        F.explode(F.slice(parts, 3, 100)).alias("word"),
    )
    counts_sink = to_store(app, "word-counts", key="word", value="count", source_names=[SOURCE])
    minute_sink = to_store(
        app, "words-per-minute", key="word", value="count", source_names=[SOURCE]
    )
    reporter.minute_batch = lambda: (
        None if minute_sink.last_batch is None else minute_sink.last_batch[0]
    )

    def write_counts(batch_df: Any, batch_id: int) -> None:
        counts_sink(batch_df, batch_id)
        generator.processed = max(generator.processed, batch_id + 1)
        reporter.after_batch(batch_id, counts_sink.last_batch[1] if counts_sink.last_batch else 0)

    word_counts = (
        events.groupBy("word")
        .count()
        .writeStream.outputMode("update")
        .option("checkpointLocation", str(directory / "checkpoints" / "word-counts"))
        .foreachBatch(write_counts)
        .start()
    )
    per_minute = (
        events.groupBy(F.window("ts", "1 minute"), "word")
        .count()
        .writeStream.outputMode("update")
        .option("checkpointLocation", str(directory / "checkpoints" / "words-per-minute"))
        .foreachBatch(minute_sink)
        .start()
    )
    return [word_counts, per_minute]


def run(args: argparse.Namespace) -> int:
    """Run the demo in a worker process of its own session (`supervised`)."""
    return supervised(lambda: _work(args), args.iqstate_argv)


def _work(args: argparse.Namespace) -> int:
    directory = Path(args.dir).resolve()
    inbox, staging = directory / "inbox", directory / "staging"
    for folder in (inbox, staging):
        folder.mkdir(parents=True, exist_ok=True)
    app = build_app(directory)
    app.start()
    print(f"iqstate demo in {directory}: Spark reads {inbox}, state in {directory / 'state'}")
    http = start_http(app, args.http_port)
    committed = committed_batches(directory / "checkpoints" / "word-counts")
    generator = Generator(inbox, staging, args, processed=committed)
    generator.start()
    spark = spark_session()
    reporter = Reporter(app, args.quiet)
    queries: list[Any] = []
    with StopSignals() as signals:
        try:
            queries = start_queries(spark, app, directory, generator, reporter)
            deadline = time.monotonic() + args.duration if args.duration else None
            while not (generator.finished or signals.requested.is_set()):
                if deadline is not None and time.monotonic() >= deadline:
                    break
                for query in queries:
                    if query.exception() is not None:
                        raise RuntimeError(f"streaming query failed: {query.exception()}")
                signals.requested.wait(0.2)
            if signals.requested.is_set():
                print("\ninterrupted; stopping after the input already written", flush=True)
            # Stop writing input and let both queries finish what was written: stopping a
            # query in the middle of a batch fails the batch and makes Spark noisy.
            generator.stopped.set()
            generator.join()
            for query in queries:
                query.processAllAvailable()
            reporter.summary()
        except KeyboardInterrupt:
            print("\ninterrupted again; stopping now", flush=True)
        finally:
            generator.stopped.set()
            for query in queries:
                query.stop()
            if http is not None:
                http.stop()
            app.close()
            spark.stop()
    print(f"done: {reporter.batches} word-count batches, {reporter.rows:,} rows")
    return 0
