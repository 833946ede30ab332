"""On the session's real broker: a window store's changelog no longer keeps expired windows
once Kafka compacts it, because the active replica writes a tombstone for each window its
retention drops (`iqstate_kafka.expiry`); a replica rebuilt from the compacted changelog
answers the same."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as KafkaPartition
from iqstate_kafka import KafkaCluster, LocalBroker, changelog_topic, ensure_changelog_topics
from iqstate_kafka.expiry import ExpiryTombstones
from replica_support import eventually

from iqstate import Application, StateQueryRequest, TopicPartition, WindowRangeQuery
from iqstate.keyspace import decode_window_key, encode_window_key

COMPACTING = {"segment.ms": "100", "min.cleanable.dirty.ratio": "0.001"}
"""Topic settings under which the broker compacts within seconds (its cleaner looks every
second: `iqstate_kafka.testing.BROKER_SETTINGS`)."""


def declared(app: Application) -> Application:
    app.window_store("w", 1, window_size_ms=10, retention_ms=100, engine="rocksdb",
                     key_serde="string", value_serde="int64")  # fmt: skip
    return app


def logged(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """The `(key, value)` records of `topic` partition 0 as the log stands (compaction
    removes records a later one of their key replaced)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        _, end = consumer.get_watermark_offsets(KafkaPartition(topic, 0), timeout=10)
        consumer.assign([KafkaPartition(topic, 0, OFFSET_BEGINNING)])
        records: list[tuple[bytes, bytes | None]] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            key = message.key()
            assert key is not None
            records.append((key, message.value()))
            if message.offset() >= end - 1:
                return records
        raise AssertionError(f"{topic}: did not read up to offset {end}")
    finally:
        consumer.close()


def windows(app: Application) -> list[tuple[str, int, int]]:
    request = StateQueryRequest.in_store("w").with_query(
        WindowRangeQuery.with_window_start_range(0, 1_000)
    )
    result = app.query(request).only_partition_result()
    if result is None or result.is_failure:
        return []
    with result.result as rows:
        return [(window.key, window.start_ms, value) for window, value in rows]


def test_compaction_removes_the_windows_retention_dropped(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    cluster = KafkaCluster(kafka_broker.bootstrap_servers, timeout=10.0, topic_config=COMPACTING)
    application_id = unique_name("app")
    topic = changelog_topic(application_id, "w")
    expired_key = encode_window_key(b"old", 0)
    with declared(
        Application(
            application_id, tmp_path / "a", application_server="a.test:7000", cluster=cluster
        )
    ) as app:
        with app.begin_batch(position={"in": {0: 1}}, batch_id=1) as batch:
            batch.put("w", "old", 1, 0)
            batch.put("w", "kept", 2, 90)
        assert expired_key in dict(logged(cluster.bootstrap_servers, topic))
        time.sleep(0.2)  # segments roll after 100 ms: each batch starts a new one
        with app.begin_batch(position={"in": {0: 2}}, batch_id=2) as batch:
            batch.put("w", "new", 3, 150)  # stream time 150: starts at or before 50 expire
        time.sleep(0.2)
        with app.begin_batch(position={"in": {0: 3}}, batch_id=3) as batch:
            batch.put("w", "newer", 4, 160)  # closes the segment of batch 2 for the cleaner
        everything = [("kept", 90, 2), ("new", 150, 3), ("newer", 160, 4)]
        eventually(lambda: windows(app) == everything, "the active replica applying batch 3")

        def compacted() -> bool:  # only the tombstone of the expired window is left
            return [v for k, v in logged(cluster.bootstrap_servers, topic) if k == expired_key] == [
                None
            ]

        eventually(compacted, "the expired window's record compacted away", within=60)
    kept = {decode_window_key(k) for k, v in logged(cluster.bootstrap_servers, topic) if v}
    assert {(b"kept", 90), (b"new", 150), (b"newer", 160)} <= kept
    with declared(
        Application(
            application_id, tmp_path / "b", application_server="b.test:7000", cluster=cluster
        )
    ) as rebuilt:
        eventually(
            lambda: windows(rebuilt) == everything,
            "the replica rebuilt from the compacted changelog answering",
        )


def test_tombstones_that_cannot_be_written_are_reported_once_per_topic(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    # Best effort: a failure costs disk, not data. It is said once, with the remedy, and
    # the follower goes on (`send` never raises nor waits).
    cluster = KafkaCluster(kafka_broker.bootstrap_servers, timeout=10.0)
    application_id = unique_name("app")
    (topic,) = ensure_changelog_topics(cluster, application_id, {"w": 1}).values()
    tombstones = ExpiryTombstones(cluster)
    nowhere = TopicPartition(topic, 7)  # a partition the topic does not have
    with caplog.at_level(logging.WARNING, logger="iqstate_kafka.expiry"):
        tombstones.send(nowhere, [b"a", b"b"])
        tombstones.close()
        tombstones.send(nowhere, [b"c"])
        tombstones.close()
    (line,) = [r.getMessage() for r in caplog.records]
    assert f"expiry tombstones for {topic} could not be written" in line
    tombstones.send(TopicPartition(topic, 0), [b"k"])
    tombstones.close()
    assert logged(cluster.bootstrap_servers, topic) == [(b"k", None)]


def test_trailing_tombstones_leave_no_standby_lag_behind(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    # The tombstones come after the marker of the batch that expired their windows: with
    # nothing written after them, no unit commits past them, and a standby's lag must not
    # stay at their count (it would never count as caught up, nor serve `acceptable_lag=0`).
    cluster = KafkaCluster(kafka_broker.bootstrap_servers, timeout=10.0)
    application_id = unique_name("app")
    topic = changelog_topic(application_id, "w")
    apps = [
        declared(
            Application(
                application_id,
                tmp_path / name,
                application_server=f"{name}.test:7000",
                cluster=cluster,
                num_standby_replicas=1,
            )
        )
        for name in ("a", "b")
    ]
    try:
        for app in apps:
            app.start()

        def standby() -> Application | None:
            for app in apps:
                role = app.roles().get("w", {}).get(0)
                if role is not None and role.state == "STANDBY":
                    return app
            return None

        follower = eventually(standby, "one instance hosting the standby", within=60)
        with apps[0].begin_batch(position={"in": {0: 1}}, batch_id=1) as batch:
            batch.put("w", "old", 1, 0)
        with apps[0].begin_batch(position={"in": {0: 2}}, batch_id=2) as batch:
            batch.put("w", "new", 2, 200)  # expires old@0 once the active applies it
        eventually(
            lambda: (
                logged(cluster.bootstrap_servers, topic)[-1] == (encode_window_key(b"old", 0), None)
            ),
            "the expiry tombstone ending the log",
        )

        def lag() -> int | None:
            return follower.all_local_store_partition_lags()["w"][0].offset_lag

        eventually(lambda: lag() == 0, "no standby lag left behind the trailing tombstone")
        time.sleep(2.5)  # the follower asks the broker for the end offset every second
        assert lag() == 0, "the end offset past the tombstone is known by now"
    finally:
        for app in apps:
            app.close()
