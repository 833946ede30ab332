"""`LocalBroker` stopped and started again under running clients, and a broker that cannot
start. Uses brokers of its own, not the session's, so the session's broker stays up."""

from __future__ import annotations

from pathlib import Path

import pytest
from changelog_support import read_events, units_by_partition
from iqstate_kafka import (
    BatchWriter,
    BrokerUnavailableError,
    ChangelogConsumer,
    DeliveryError,
    KafkaCluster,
    LocalBroker,
    LocalBrokerError,
    ensure_changelog_topics,
)

from iqstate import Position, TopicPartition


def test_clients_outlive_a_broker_restart(tmp_path: Path) -> None:
    """Stopped, the broker fails a batch and an offsets request with clear errors instead of
    hanging; started again on the same ports and data, the same writer and reader carry on,
    and the batch written before the restart is still there."""
    with LocalBroker(tmp_path / "broker") as broker:
        address = broker.bootstrap_servers
        cluster = KafkaCluster(address, timeout=5.0)
        topic = ensure_changelog_topics(cluster, "restart", {"counts": 1})["counts"]
        partition = TopicPartition(topic, 0)
        impatient = KafkaCluster(address, timeout=2.0)
        with (
            BatchWriter(cluster, "restart", delivery_timeout=3.0) as writer,
            ChangelogConsumer(impatient) as reader,
        ):
            reader.assign(partition, None)

            def write(batch_id: int) -> None:
                writer.write(
                    {("counts", 0): [(b"k", b"%d" % batch_id)]},
                    batch_id=batch_id,
                    position=Position.from_map({"events": {0: batch_id}}),
                    stores={"counts": 1},
                )

            write(1)
            (first,) = units_by_partition(read_events(reader, 1))[partition]

            broker.stop()
            assert not broker.running
            with pytest.raises(DeliveryError, match=r"batch 2 is not durable .* replay the batch"):
                write(2)
            with pytest.raises(BrokerUnavailableError, match="gave no offsets .* within 2 s"):
                reader.watermarks(partition)

            broker.start()
            assert broker.bootstrap_servers == address
            write(2)
            (second,) = units_by_partition(read_events(reader, 1))[partition]

        assert first.entries(None) == [(b"k", b"1")]
        assert second.marker is not None and second.marker.batch_id == 2
        assert second.entries(None) == [(b"k", b"2")]
        with ChangelogConsumer(cluster) as fresh:
            fresh.assign(partition, None)
            units = units_by_partition(read_events(fresh, 2))[partition]
        assert [unit.entries(None) for unit in units] == [[(b"k", b"1")], [(b"k", b"2")]]
    assert not broker.running


def test_a_broker_that_cannot_start_says_why(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "broker", heap="1k")
    with pytest.raises(LocalBrokerError) as caught, broker:
        pass
    message = str(caught.value)
    assert message.startswith("the Kafka broker exited with code 1 while starting")
    assert "heap" in message
    assert broker.pid is None


def test_a_broker_that_fails_says_why_in_kafkas_words(tmp_path: Path) -> None:
    """Kafka's own error reaches its output (its jars alone bind SLF4J to nothing)."""
    data = tmp_path / "broker" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text(
        "version=1\nnode.id=2\ncluster.id=25rW71SbQ02pouPjwMWG3A\n", encoding="utf-8"
    )
    with pytest.raises(LocalBrokerError) as caught, LocalBroker(tmp_path / "broker"):
        pass
    message = str(caught.value)
    assert "ERROR Exiting Kafka due to fatal exception" in message
    assert "Stored node id 2 doesn't match previous node id 1" in message
    assert "StaticLoggerBinder" not in message
