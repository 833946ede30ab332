"""Writing a checkpoint's offsets file and reading a changelog back, for the distributed
sink's tests."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from iqstate_kafka import KafkaCluster
from iqstate_kafka.format import BatchMarker, DataRecord, decode

Record = DataRecord | BatchMarker


def write_offsets(checkpoint: Path, batch: int, line: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{line}\n")


def read_changelog(cluster: KafkaCluster, topic: str, partitions: int) -> dict[int, list[Record]]:
    """Every record of `topic`, decoded, by partition (read up to the end offsets)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    found: dict[int, list[Record]] = {}
    try:
        for partition in range(partitions):
            _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, 0)])
            records: list[Record] = []
            while len(records) < end:
                for message in consumer.consume(500, timeout=1):
                    assert message.error() is None, message.error()
                    records.append(
                        decode(
                            topic,
                            partition,
                            message.offset(),
                            message.key(),
                            message.value(),
                            message.headers(),
                        )
                    )
            found[partition] = records
    finally:
        consumer.close()
    return found
