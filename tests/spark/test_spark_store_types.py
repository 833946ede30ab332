"""The Spark sink writes timestamped, versioned and session stores, embedded and distributed.

One pipeline over a small inbox of events with event times (out of order within and across
its two micro-batches, a tombstone among them) feeds four stores: the count and latest
event time of each user (a timestamped store, from an aggregation, `timestamp=` a Spark
timestamp column), every event as a version (a versioned store, `timestamp=` an integer
column of epoch milliseconds, a null value writing a tombstone version), each user's
sessions (a session store, from `groupBy(F.session_window(...), "user")`) and each user's
count (a global store). What is checked is what a user reads: current and as-of values,
version histories and sessions, against a ground truth computed here in plain Python from
the same events. In distributed mode an in-process serving instance follows the changelogs
the sink's Spark tasks write, and answers once it has reached the pipeline's positions.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from cluster_support import read_changelog, write_offsets
from iqstate_kafka import KafkaCluster, LocalBroker
from iqstate_kafka.topics import changelog_topic
from iqstate_spark import ClusterSink, ClusterStores, batch_position, to_store
from iqstate_spark.executor_write import entries_by_partition
from iqstate_spark.rows import RowColumns
from support.network import free_port

from iqstate import (
    Application,
    KeyQuery,
    MultiVersionedKeyQuery,
    Position,
    PositionBound,
    RangeQuery,
    StateQueryRequest,
    TimestampedKeyQuery,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRecord,
    WindowRangeQuery,
)
from iqstate.errors import IqstateError

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
GAP_MS = 30_000
RETENTION_MS = 86_400_000

Event = tuple[str, int | None, int]
"""`(user, value or None, event time in seconds after BASE_MS)`."""

FILES: list[list[Event]] = [
    [
        ("alice", 1, 100),
        ("bob", 10, 130),
        ("alice", 2, 160),
        ("carol", 20, 110),
        ("alice", 3, 140),  # before alice's previous event
        ("bob", 11, 105),
    ],
    [
        ("alice", 4, 90),  # before every event of the first batch
        ("bob", None, 150),  # a tombstone
        ("carol", 21, 400),
        ("alice", 5, 150),  # between two versions of the first batch
        ("bob", 12, 175),
        ("carol", 22, 200),  # before carol's previous event
    ],
]
EVENTS = [event for file in FILES for event in file]
USERS = sorted({user for user, _, _ in EVENTS})


def ms(seconds: int) -> int:
    return BASE_MS + seconds * 1000


# -- the ground truth, in plain Python ---------------------------------------------------------


def versions_by_user() -> dict[str, list[tuple[int, int | None]]]:
    """Each user's versions `(time, value or None)` in time order."""
    found: dict[str, dict[int, int | None]] = defaultdict(dict)
    for user, value, seconds in EVENTS:
        found[user][ms(seconds)] = value
    return {user: sorted(versions.items()) for user, versions in found.items()}


def version_at(versions: list[tuple[int, int | None]], when: int) -> VersionedRecord[int] | None:
    """The version valid at `when`: the newest at or before it, unless a tombstone."""
    earlier = [i for i, (at, _) in enumerate(versions) if at <= when]
    if not earlier:
        return None
    at, value = versions[earlier[-1]]
    following = earlier[-1] + 1
    valid_to = versions[following][0] if following < len(versions) else None
    return None if value is None else VersionedRecord(value, at, valid_to)


def valid_between(
    versions: list[tuple[int, int | None]], start: int, end: int
) -> list[VersionedRecord[int]]:
    """The versions valid at some instant of `[start, end]`, oldest first, no tombstones."""
    found = []
    for i, (at, value) in enumerate(versions):
        valid_to = versions[i + 1][0] if i + 1 < len(versions) else None
        if value is not None and at <= end and (valid_to is None or valid_to > start):
            found.append(VersionedRecord(value, at, valid_to))
    return found


def sessions_of(user: str) -> list[tuple[int, int, int]]:
    """`(start, end, events)` of the user's sessions, as Spark's session windows make them:
    each event opens `[time, time + gap)`, and overlapping ones merge."""
    sessions: list[list[int]] = []
    for at in sorted(ms(seconds) for name, _, seconds in EVENTS if name == user):
        if sessions and at < sessions[-1][1]:
            sessions[-1][1] = at + GAP_MS
            sessions[-1][2] += 1
        else:
            sessions.append([at, at + GAP_MS, 1])
    return [(start, end, count) for start, end, count in sessions]


PROBES = sorted(
    {ms(s) for s in range(80, 420, 5)}
    | {ms(seconds) + delta for _, _, seconds in EVENTS for delta in (-1, 0, 1)}
)
"""The times the versioned store is asked about: a grid, and around every version."""
SPANS = [(ms(0), ms(1000)), (ms(120), ms(155)), (ms(150), ms(150)), (ms(0), ms(95))]


def truth() -> dict[tuple[Any, ...], Any]:
    """What `read` must find, from the events alone."""
    versions = versions_by_user()
    expected: dict[tuple[Any, ...], Any] = {}
    for user in USERS:
        own = [(value, ms(seconds)) for name, value, seconds in EVENTS if name == user]
        latest = max(at for _, at in own)
        expected["latest", user] = ValueAndTimestamp(len(own), latest)
        expected["counts", user] = len(own)
        expected["current", user] = version_at(versions[user], latest)
        for when in PROBES:
            expected["as_of", user, when] = version_at(versions[user], when)
        for start, end in SPANS:
            expected["versions", user, start, end] = valid_between(versions[user], start, end)
        expected["sessions", user] = sessions_of(user)
    return expected


# -- the pipeline and what a user reads ------------------------------------------------------


def write_inbox(inbox: Path) -> None:
    inbox.mkdir()
    for number, events in enumerate(FILES):
        lines = [f"{user} {'-' if value is None else value} {ms(s)}" for user, value, s in events]
        path = inbox / f"{number}.txt"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + number, 1_700_000_000 + number))  # read in this order


def events(spark: Any, inbox: Path, files_per_batch: int | None) -> Any:
    """The inbox as a stream of `user`, `value` (null: a tombstone), `ms` (epoch
    milliseconds) and `ts` (the same as a Spark timestamp)."""
    from pyspark.sql import functions as F

    reader = spark.readStream
    if files_per_batch is not None:
        reader = reader.option("maxFilesPerTrigger", files_per_batch)
    parts = F.split("value", " ")
    return (
        reader.text(str(inbox))
        .select(
            parts[0].alias("user"),
            F.when(parts[1] != "-", parts[1].cast("long")).alias("value"),
            parts[2].cast("long").alias("ms"),
        )
        .withColumn("ts", F.timestamp_millis("ms"))
    )


def run_pipeline(
    spark: Any, target: Application | ClusterStores, directory: Path, *, embedded: bool
) -> tuple[dict[str, Position], dict[str, str | None]]:
    """The four queries, each to the end of the inbox; every store's position after them,
    and how its batches were written (distributed mode).

    Spark emits session windows in complete mode here (every session in every batch, with
    its current bounds): embedded, the sink makes the store equal to each batch over two
    micro-batches; distributed (no complete mode) the sessions come from one micro-batch.
    """
    from pyspark.sql import functions as F

    inbox = directory / "inbox"
    write_inbox(inbox)
    latest = (
        events(spark, inbox, 1)
        .groupBy("user")
        .agg(F.count("*").alias("events"), F.max("ts").alias("last"))
    )
    sessions = (
        events(spark, inbox, 1 if embedded else None)
        .groupBy(F.session_window("ts", f"{GAP_MS // 1000} seconds"), "user")
        .count()
    )
    pipelines = {
        "latest": (
            latest,
            "update",
            to_store(target, "latest", key="user", value="events", timestamp="last"),
        ),
        "counts": (latest, "update", to_store(target, "counts", key="user", value="events")),
        "versions": (
            events(spark, inbox, 1),
            "append",
            to_store(target, "versions", key="user", value="value", timestamp="ms"),
        ),
        "sessions": (
            sessions,
            "complete",
            to_store(
                target,
                "sessions",
                key="user",
                value="count",
                output_mode="complete" if embedded else "update",
            ),
        ),
    }
    queries = [
        frame.writeStream.outputMode(mode)
        .option("checkpointLocation", str(directory / "checkpoints" / store))
        .foreachBatch(sink)
        .start()
        for store, (frame, mode, sink) in pipelines.items()
    ]
    positions: dict[str, Position] = {}
    write_paths: dict[str, str | None] = {}
    try:
        for query in queries:
            query.processAllAvailable()
    finally:
        for query in queries:
            query.stop()
    for store, (_, _, sink) in pipelines.items():
        assert sink.last_batch is not None
        batch_id, _ = sink.last_batch
        positions[store] = batch_position(directory / "checkpoints" / store, batch_id)
        write_paths[store] = sink.write_path if isinstance(sink, ClusterSink) else None
        if isinstance(sink, ClusterSink):
            sink.close()
    return positions, write_paths


class NotCaughtUp(Exception):
    """A store partition has not reached the pipeline's last batch yet."""


def ask(app: Application, store: str, query: Any, bound: Position | None = None) -> Any:
    """The answer of the key's partition to a key query, once it has reached `bound`."""
    request = StateQueryRequest.in_store(store).with_query(query)
    if bound is not None:
        request = request.with_position_bound(PositionBound.at(bound))
    answers = list(app.query(request).partition_results.values())
    if not answers or any(answer.is_failure for answer in answers):
        raise NotCaughtUp(store, [answer.failure_message for answer in answers])
    assert len(answers) == 1, "a key's query goes to the key's partition only"
    return answers[0].result


def read(app: Application, positions: dict[str, Position]) -> dict[tuple[Any, ...], Any]:
    """Everything `truth` predicts, as the stores answer it at the pipeline's positions."""
    found: dict[tuple[Any, ...], Any] = {}
    for user in USERS:
        found["latest", user] = ask(
            app, "latest", TimestampedKeyQuery.with_key(user), positions["latest"]
        )
        found["counts", user] = ask(app, "counts", KeyQuery.with_key(user), positions["counts"])
        versions = positions["versions"]
        found["current", user] = ask(app, "versions", VersionedKeyQuery.with_key(user), versions)
        for when in PROBES:
            at: VersionedKeyQuery[str, int] = VersionedKeyQuery.with_key(user).as_of(when)
            found["as_of", user, when] = ask(app, "versions", at, versions)
        for start, end in SPANS:
            history: MultiVersionedKeyQuery[str, int] = (
                MultiVersionedKeyQuery.with_key(user)
                .from_time(start)
                .to_time(end)
                .with_ascending_timestamps()
            )
            with ask(app, "versions", history, versions) as records:
                found["versions", user, start, end] = list(records)
        of_user: WindowRangeQuery[str, int] = WindowRangeQuery.with_key(user)
        with ask(app, "sessions", of_user, positions["sessions"]) as sessions:
            found["sessions", user] = [(w.start_ms, w.end_ms, count) for w, count in sessions]
    return found


def read_once_caught_up(
    app: Application, positions: dict[str, Position], timeout: float = 120.0
) -> dict[tuple[Any, ...], Any]:
    """`read`, as soon as every partition asked has reached the pipeline's positions."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return read(app, positions)
        except NotCaughtUp as waiting:
            if time.monotonic() > deadline:
                raise AssertionError(f"the replicas did not catch up: {waiting}") from waiting
        time.sleep(0.2)


def declare(target: Application) -> None:
    target.timestamped_key_value_store("latest", 3)
    target.versioned_key_value_store("versions", 2, history_retention_ms=RETENTION_MS)
    target.session_store("sessions", 2, retention_ms=RETENTION_MS)
    target.global_key_value_store("counts")


def cluster_stores(bootstrap: str, application_id: str) -> ClusterStores:
    """The stores of `declare` as a distributed pipeline declares them, and two more."""
    stores = ClusterStores(KafkaCluster(bootstrap), application_id)
    stores.timestamped_key_value_store("latest", 3)
    stores.versioned_key_value_store("versions", 2)
    stores.session_store("sessions", 2)
    stores.global_key_value_store("counts")
    stores.key_value_store("plain", 2)
    stores.window_store("windows", 2)
    return stores


# -- the tests --------------------------------------------------------------------------------


def test_ground_truth_has_what_the_stores_must_get_right() -> None:
    """The events exercise what is tested: out-of-order versions, a tombstone, sessions
    that the second batch extends or merges."""
    expected = truth()
    assert expected["as_of", "bob", ms(160)] is None, "bob's tombstone version at 150 s"
    assert expected["as_of", "bob", ms(150) - 1] == VersionedRecord(10, ms(130), ms(150))
    assert expected["as_of", "alice", ms(95)] == VersionedRecord(4, ms(90), ms(100))
    assert expected["sessions", "alice"] == [(ms(90), ms(130), 2), (ms(140), ms(190), 3)]
    assert expected["sessions", "bob"] == [(ms(105), ms(205), 4)]
    assert expected["latest", "carol"] == ValueAndTimestamp(3, ms(400))


@pytest.mark.iqstate_slow
def test_embedded_pipeline_writes_timestamped_versioned_and_session_stores(
    spark: Any, tmp_path: Path
) -> None:
    app = Application("event-times", tmp_path / "state")
    declare(app)
    with app:
        positions, _ = run_pipeline(spark, app, tmp_path, embedded=True)
        assert positions["versions"] == Position.from_map({"spark-source-0": {0: 1}})
        assert positions["sessions"] == positions["versions"], "two micro-batches each"
        assert read(app, positions) == truth()
        every_key: RangeQuery[str, int] = RangeQuery.with_no_bounds()
        everything = app.query(StateQueryRequest.in_store("latest").with_query(every_key))
        assert {r.position for r in everything.partition_results.values()} == {
            positions["latest"]
        }, "every partition at the last batch's offsets"


@pytest.mark.iqstate_slow
def test_distributed_pipeline_writes_what_serving_replicas_answer(
    spark: Any, kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app_id = unique_name("app")
    stores = cluster_stores(kafka_broker.bootstrap_servers, app_id)
    serving = Application(
        app_id, tmp_path / "serving", application_server=f"127.0.0.1:{free_port()}",
        cluster=KafkaCluster(kafka_broker.bootstrap_servers),
    )  # fmt: skip
    declare(serving)
    with serving:
        positions, write_paths = run_pipeline(spark, stores, tmp_path, embedded=False)
        assert write_paths == {
            "latest": "python-producer",  # the core's encoding of times, in Python
            "counts": "spark-kafka-sink",  # a global store's records: Spark's own
            "versions": "python-producer",
            "sessions": "python-producer",
        }
        expected = truth()
        found = read_once_caught_up(serving, positions)
        assert found == expected


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Application]:
    """An embedded application with a store of every type the sink writes."""
    application = Application("arguments", tmp_path / "state")
    application.key_value_store("plain", 2)
    application.window_store("windows", 2, 60_000, RETENTION_MS)
    declare(application)
    with application:
        yield application


def test_wrong_combinations_are_refused_naming_store_and_argument(app: Application) -> None:
    refused: list[tuple[dict[str, Any], str]] = [
        ({"store": "plain", "timestamp": "ts"}, "store 'plain' is a key-value store; timestamp="),
        ({"store": "plain", "session": "s"}, "store 'plain' is a key-value store; session="),
        ({"store": "latest"}, "store 'latest' is a timestamped key-value store: pass timestamp="),
        ({"store": "versions"}, "store 'versions' is a versioned key-value store: pass timestamp="),
        (
            {"store": "versions", "timestamp": "ts", "window": "w"},
            "store 'versions' is a versioned key-value store; window= does not apply",
        ),
        (
            {"store": "sessions", "timestamp": "ts"},
            "store 'sessions' is a session store; timestamp= does not apply",
        ),
        ({"store": "windows", "session": "s"}, "store 'windows' is a window store; session="),
        (
            {"store": "versions", "timestamp": "ts", "output_mode": "complete"},
            "complete mode is supported for .*; store 'versions' is a versioned key-value store",
        ),
    ]
    nowhere = cluster_stores("127.0.0.1:9", "arguments")  # refused before any connection
    for arguments, message in refused:
        with pytest.raises(ValueError, match=message):
            to_store(app, key="k", **arguments)
        if arguments.get("output_mode") != "complete":  # refused earlier in distributed mode
            with pytest.raises(ValueError, match=message):
                to_store(nowhere, key="k", **arguments)


@pytest.mark.parametrize("mode", ["embedded", "distributed"])
def test_rows_without_usable_times_are_refused_before_anything_is_written(
    spark: Any,
    app: Application,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    unique_name: Callable[[str], str],
    mode: str,
) -> None:
    target: Application | ClusterStores = app
    if mode == "distributed":
        broker: LocalBroker = request.getfixturevalue("kafka_broker")
        target = cluster_stores(broker.bootstrap_servers, unique_name("app"))
    write_offsets(tmp_path, 0, '{"events":{"0":1}}')
    refused = [
        (
            to_store(target, "sessions", key="k", value="v", checkpoint=tmp_path),
            spark.createDataFrame([("a", 1)], "k string, v long"),
            r"to_store\('sessions'\): the batch has no column\(s\) \['session_window'\] "
            r"\(named by session=\)",
        ),
        (
            to_store(target, "versions", key="k", value="v", timestamp="t", checkpoint=tmp_path),
            spark.createDataFrame([("a", 1, "noon")], "k string, v long, t string"),
            r"to_store\('versions'\): column 't' \(timestamp=\) must hold timestamps or integers",
        ),
        (
            to_store(target, "sessions", key="k", value="v", session="s", checkpoint=tmp_path),
            spark.createDataFrame([("a", 1, 5)], "k string, v long, s long"),
            r"to_store\('sessions'\): column 's' \(session=\) must be a session",
        ),
        (  # "false" is a true value in Python: it would delete every row
            to_store(
                target,
                "latest",
                key="k",
                value="v",
                timestamp="t",
                tombstone="gone",
                checkpoint=tmp_path,
            ),
            spark.createDataFrame([("a", 1, 5, "false")], "k string, v long, t long, gone string"),
            r"to_store\('latest'\): column 'gone' \(tombstone=\) must be boolean, got string",
        ),
    ]
    if mode == "embedded":  # a null time: found by the tasks, in distributed mode
        refused.append(
            (
                to_store(app, "latest", key="k", value="v", timestamp="t", checkpoint=tmp_path),
                spark.createDataFrame([("a", 1, 5), ("b", 2, None)], "k string, v long, t long"),
                r"to_store\('latest'\): a row has a null timestamp \(column 't', timestamp=\)",
            )
        )
    for sink, frame, message in refused:
        with pytest.raises(IqstateError, match=message):
            sink(frame, 0)
        assert sink.last_batch is None
    if isinstance(target, ClusterStores):
        for store in ("sessions", "versions"):
            topic = changelog_topic(target.application_id, store)
            assert read_changelog(target.cluster, topic, 2) == {0: [], 1: []}, "nothing written"
        return
    assert ask(app, "latest", TimestampedKeyQuery.with_key("a")) is None
    assert ask(app, "versions", VersionedKeyQuery.with_key("a")) is None
    with ask(app, "sessions", WindowRangeQuery.with_key("a")) as sessions:
        assert list(sessions) == [], "nothing was written"


def test_tombstones_and_complete_mode_delete(spark: Any, app: Application, tmp_path: Path) -> None:
    """A true tombstone column deletes a timestamped key and a session; complete mode
    deletes the timestamped keys and the sessions a batch lacks."""

    def at(seconds: int) -> datetime:
        return datetime.fromtimestamp(ms(seconds) / 1000, UTC)

    write_offsets(tmp_path, 0, '{"events":{"0":1}}')
    write_offsets(tmp_path, 1, '{"events":{"0":2}}')
    latest = to_store(app, "latest", key="k", value="v", timestamp="t", tombstone="gone",
                      output_mode="complete", checkpoint=tmp_path)  # fmt: skip
    schema = "k string, v long, t timestamp, gone boolean"
    latest(spark.createDataFrame([("a", 1, at(5), False), ("b", 2, at(6), False)], schema), 0)
    latest(spark.createDataFrame([("b", None, at(7), True), ("c", 3, at(8), False)], schema), 1)
    found = {k: ask(app, "latest", TimestampedKeyQuery.with_key(k)) for k in "abc"}
    assert found == {"a": None, "b": None, "c": ValueAndTimestamp(3, ms(8))}

    sessions = to_store(app, "sessions", key="k", value="v", tombstone="gone",
                        output_mode="complete", checkpoint=tmp_path)  # fmt: skip
    schema = (
        "k string, session_window struct<start: timestamp, end: timestamp>, v long, gone boolean"
    )
    first = [("a", (at(0), at(10)), 1, False), ("a", (at(20), at(30)), 1, False)]
    second = [("a", (at(0), at(30)), 3, False), ("b", (at(0), at(5)), 1, True)]
    sessions(spark.createDataFrame(first, schema), 0)
    sessions(spark.createDataFrame(second, schema), 1)
    stored = {}
    for key in "ab":
        with ask(app, "sessions", WindowRangeQuery.with_key(key)) as pairs:
            stored.update({(w.key, w.start_ms, w.end_ms): v for w, v in pairs})
    assert stored == {("a", ms(0), ms(30)): 3}, "the merged session replaced the two it covers"


def test_distributed_entries_are_the_embedded_batch_entries(app: Application) -> None:
    """A Spark task's changelog entries for the rows of every store type are, byte for byte
    and partition for partition, those an embedded batch writes for the same rows."""
    stores = cluster_stores("127.0.0.1:9", "arguments")
    users = [f"user-{i}" for i in range(20)]
    values = [None if i % 7 == 3 else i for i in range(20)]
    times = [ms(i * 13 % 17) for i in range(20)]
    sessions = [{"start": t, "end": t + GAP_MS} for t in times]
    rows = pa.RecordBatch.from_pydict(
        {"k": users, "v": values, "t": times, "session_window": sessions}
    )
    columns = {
        "latest": RowColumns.of("latest", "k", "v", None, None, timestamp="t"),
        "versions": RowColumns.of("versions", "k", "v", None, None, timestamp="t"),
        "sessions": RowColumns.of("sessions", "k", "v", None, None, session="session_window"),
        "counts": RowColumns.of("counts", "k", "v", None, None),
    }
    with app.begin_batch() as batch:
        for user, value, at in zip(users, values, times, strict=True):
            batch.put("latest", user, value, timestamp=at)
            batch.put("versions", user, value, timestamp=at)
            batch.put("sessions", user, value, session=(at, at + GAP_MS))
            batch.put("counts", user, value)
        embedded = {where: list(entries) for where, entries in batch.pending().items()}
    distributed = {
        where: list(entries)
        for name, rows_of in columns.items()
        for where, entries in entries_by_partition(stores.stores[name], rows_of, [rows])
    }
    assert distributed == embedded
