"""A writer is not a server (SPEC 9): `Application(..., cluster=..., serving=False)` writes
its batches to the changelogs, is not a member, hosts no partition and is never routed to."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from iqstate_kafka import KafkaCluster
from iqstate_kafka.declarations import declared_shapes
from iqstate_kafka.topics import members_topic
from support.network import free_port

from iqstate import (
    Application,
    IncompatibleStateError,
    KeyQuery,
    RangeQuery,
    StateQueryRequest,
    UnknownStateStoreError,
)


def test_a_writer_writes_without_joining(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app_id = unique_name("writer")
    bootstrap = kafka_broker.bootstrap_servers
    serving = Application(
        app_id, tmp_path / "serving", application_server=f"127.0.0.1:{free_port()}",
        cluster=KafkaCluster(bootstrap),
    )  # fmt: skip
    writer = Application(
        app_id, tmp_path / "writer", cluster=KafkaCluster(bootstrap), serving=False
    )
    for app in (serving, writer):
        app.key_value_store("counts", 3, value_serde="int64")
    written = {f"k{i}": i for i in range(30)}
    with serving:
        with writer:
            with writer.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
                batch.put_all("counts", list(written.items()))
            request = StateQueryRequest.in_store("counts")
            everything = request.with_query(RangeQuery.with_no_bounds())
            deadline = time.monotonic() + 60
            while True:
                answers = serving.query(everything).partition_results
                read = {k: v for r in answers.values() if r.is_success for k, v in r.result}
                if read == written:
                    break
                assert time.monotonic() < deadline, f"the serving instance read {read}"
                time.sleep(0.2)
            # The writer is nowhere in the cluster: not in metadata, hosting nothing.
            assert [m.host_info for m in serving.all_metadata()] == [serving.host_info]
            roles = {(store, p): role.state for store, p, role, _ in serving.local_partitions()}
            assert roles == {("counts", p): "RUNNING" for p in range(3)}
            assert writer.all_metadata() == [] and writer.local_partitions() == []
            assert writer.query(everything).partition_results == {}
        time.sleep(1.5)  # heartbeats: a member that left would be listed as gone by now
        statuses = serving.cluster_status()
        assert [(s.host_info, s.live) for s in statuses] == [(serving.host_info, True)]


def test_an_application_with_no_store_starts_and_says_why_a_write_fails(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    # Nothing to check on the cluster: it starts (the client used to refuse describing no
    # topics, with a raw error from inside confluent_kafka), and a write names the store.
    writer = Application(
        unique_name("empty"), tmp_path, cluster=KafkaCluster(kafka_broker.bootstrap_servers),
        serving=False,
    )  # fmt: skip
    with writer:
        with pytest.raises(UnknownStateStoreError, match="orders"):
            with writer.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
                batch.put("orders", "k", "v")


def test_a_writer_declaring_a_store_otherwise_than_the_instances_is_refused_at_start(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    # Its values would reach every replica and fail every read of those keys there.
    app_id = unique_name("unlike")
    bootstrap = kafka_broker.bootstrap_servers
    serving = Application(
        app_id, tmp_path / "serving", application_server=f"127.0.0.1:{free_port()}",
        cluster=KafkaCluster(bootstrap),
    )  # fmt: skip
    serving.key_value_store("orders", 2, value_serde="json")

    def writer(name: str, value_serde: str) -> Application:
        app = Application(app_id, tmp_path / name, cluster=KafkaCluster(bootstrap), serving=False)
        app.key_value_store("orders", 2, value_serde=value_serde)
        return app

    with serving:
        unlike = writer("unlike", "string")
        with pytest.raises(IncompatibleStateError) as refused:
            unlike.start()
        assert "store 'orders' as key_value, key_serde string, value_serde string here" in str(
            refused.value
        )
        assert "value_serde json by 127.0.0.1:" in str(refused.value)
        unlike.close()
        with writer("alike", "json") as alike:
            with alike.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
                batch.put("orders", "o-1", {"total": 12})


def test_an_instance_starting_after_a_writer_is_checked_against_its_declarations(
    kafka_broker: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The writer started first, with nobody to compare with: it leaves its declarations on
    # the members topic, so an instance reading its int64 values as float64 (every value
    # a wrong number, never an error) cannot join.
    app_id = unique_name("writer-first")
    bootstrap = kafka_broker.bootstrap_servers
    writer = Application(
        app_id, tmp_path / "writer", cluster=KafkaCluster(bootstrap), serving=False
    )
    writer.key_value_store("totals", 2, value_serde="int64")

    def instance(name: str, value_serde: str) -> Application:
        app = Application(
            app_id, tmp_path / name, application_server=f"127.0.0.1:{free_port()}",
            cluster=KafkaCluster(bootstrap),
        )  # fmt: skip
        app.key_value_store("totals", 2, value_serde=value_serde)
        return app

    with writer:
        with writer.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
            batch.put("totals", "t-1", 12)
        unlike = instance("unlike", "float64")
        with pytest.raises(IncompatibleStateError) as refused:
            unlike.start()
        message = str(refused.value)
        assert "store 'totals' as key_value, key_serde string, value_serde float64 here" in message
        assert "as key_value, key_serde string, value_serde int64 by a writer on " in message
        unlike.close()
        with instance("alike", "int64") as alike:  # its heartbeats pass the writer's records
            request = StateQueryRequest.in_store("totals").with_query(KeyQuery.with_key("t-1"))
            deadline = time.monotonic() + 30
            while (found := alike.query(request).only_partition_result()) is None:
                assert time.monotonic() < deadline, "the instance never read the batch"
                time.sleep(0.2)
            assert found.result == 12
            assert [m.host_info for m in alike.all_metadata()] == [alike.host_info]
    # membership skips the writer's records quietly: they are no heartbeats gone bad
    assert "does not decode" not in caplog.text


def test_a_writers_declaration_made_by_mistake_is_withdrawn_with_a_tombstone(
    kafka_broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app_id = unique_name("withdrawn")
    cluster = KafkaCluster(kafka_broker.bootstrap_servers)
    mistaken = Application(app_id, tmp_path / "mistaken", cluster=cluster, serving=False)
    mistaken.key_value_store("totals", 2, value_serde="float64")
    with mistaken:
        pass  # it declared float64 and wrote nothing
    instance = Application(
        app_id, tmp_path / "serving", application_server=f"127.0.0.1:{free_port()}",
        cluster=cluster,
    )  # fmt: skip
    instance.key_value_store("totals", 2, value_serde="int64")
    with pytest.raises(IncompatibleStateError, match=r"key 'writer/<store>' on topic "):
        instance.start()
    instance.close()
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    producer.produce(members_topic(app_id), key=b"writer/totals", value=None)
    assert producer.flush(10) == 0
    assert "totals" not in declared_shapes(cluster, app_id, writers_only=True)
    corrected = Application(
        app_id, tmp_path / "serving", application_server=f"127.0.0.1:{free_port()}",
        cluster=cluster,
    )  # fmt: skip
    corrected.key_value_store("totals", 2, value_serde="int64")
    with corrected:  # joins: nothing declares the store otherwise any more
        assert corrected.state.name in ("RUNNING", "REBALANCING")
