"""The data both sides hold, written once per run, and the query workload both sides replay.

Keys are `key-%012d` (16 bytes) in a shuffled order, values 100 hexadecimal characters
derived from the key (distinct, and barely compressible by LZ4), both UTF-8 strings. Each
record goes to the partition Kafka's default partitioner picks for its key bytes (murmur2),
on both sides, so a key lives in the same partition number everywhere.

* iqstate's changelog `<iqstate-app>-kv-changelog` is written with `BatchWriter`, as
  bench/kafka_restore.py does (batches of 50,000 records, one marker per partition each).
* Kafka Streams' changelog `<streams-app>-kv-changelog` gets the same records in the same
  order from a plain producer (no compression, as iqstate's writer), and its empty input
  topic `<streams-app>-input` is created beside it: an instance with an empty state
  directory restores the store from that changelog, as after losing its disk.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from iqstate_kafka import BatchWriter, KafkaCluster, ensure_changelog_topics

from iqstate import Position
from iqstate.runtime.partitioner import partition_for_bytes

STORE = "kv"
RANGE_SIZE = 100


def shuffled_keys(records: int, seed: int = 7) -> list[str]:
    """The keys in the order they are written."""
    keys = [f"key-{number:012d}" for number in range(records)]
    random.Random(seed).shuffle(keys)
    return keys


def value_for(key: str) -> str:
    """A 100-character value of the key: distinct per key, not compressible to nothing."""
    return hashlib.blake2b(key.encode(), digest_size=50).hexdigest()


def partition_of(key: str, partitions: int) -> int:
    return partition_for_bytes(key.encode(), partitions)


def batches(keys: list[str], size: int) -> Iterator[tuple[int, list[str]]]:
    for number, start in enumerate(range(0, len(keys), size)):
        yield number, keys[start : start + size]


def write_iqstate_changelog(
    cluster: KafkaCluster, app_id: str, keys: list[str], partitions: int, batch: int
) -> None:
    """iqstate's changelog of the store, through its writer (data, then markers)."""
    ensure_changelog_topics(cluster, app_id, {STORE: partitions})
    with BatchWriter(cluster, app_id) as writer:
        for number, chunk in batches(keys, batch):
            entries: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
            for key in chunk:
                entries.setdefault((STORE, partition_of(key, partitions)), []).append(
                    (key.encode(), value_for(key).encode())
                )
            writer.write(
                entries,
                batch_id=number,
                position=Position.from_map({"source": {0: number * batch + len(chunk)}}),
                stores={STORE: partitions},
            )


def create_streams_topics(bootstrap: str, app_id: str, partitions: int) -> None:
    """The Kafka Streams application's input topic and its store's changelog (compacted)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    compacted = {"cleanup.policy": "compact"}
    topics = [
        NewTopic(f"{app_id}-input", partitions, 1),
        NewTopic(f"{app_id}-{STORE}-changelog", partitions, 1, config=compacted),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)


def write_streams_changelog(bootstrap: str, app_id: str, keys: list[str], partitions: int) -> None:
    """Kafka Streams' changelog of the store: the same records, in the same order."""
    create_streams_topics(bootstrap, app_id, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    topic = f"{app_id}-{STORE}-changelog"
    for key in keys:
        while True:
            try:
                producer.produce(
                    topic, value_for(key).encode(), key.encode(), partition_of(key, partitions)
                )
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise RuntimeError("records of Kafka Streams' changelog were not delivered")


def last_written(keys: list[str], partitions: int) -> dict[int, str]:
    """Each partition's last-written key: a replica that answers it has restored everything."""
    found: dict[int, str] = {}
    for key in reversed(keys):
        found.setdefault(partition_of(key, partitions), key)
        if len(found) == partitions:
            break
    return found


def write_workload(
    path: Path, keys: list[str], partitions: int, lookups: int, ranges: int, seed: int = 11
) -> None:
    """Lines `K key partition` (random existing keys), `R partition lower upper` (100
    consecutive keys of one partition, bounds inclusive) and `L partition key value`."""
    rng = random.Random(seed)
    by_partition: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for key in keys:
        by_partition[partition_of(key, partitions)].append(key)
    for partition_keys in by_partition.values():
        partition_keys.sort()
    lines = []
    for key in rng.choices(keys, k=lookups):
        lines.append(f"K {key} {partition_of(key, partitions)}")
    for _ in range(ranges):
        partition = rng.randrange(partitions)
        ordered = by_partition[partition]
        start = rng.randrange(max(1, len(ordered) - RANGE_SIZE + 1))
        upper = ordered[min(len(ordered), start + RANGE_SIZE) - 1]
        lines.append(f"R {partition} {ordered[start]} {upper}")
    for partition, key in sorted(last_written(keys, partitions).items()):
        lines.append(f"L {partition} {key} {value_for(key)}")
    path.write_text("\n".join(lines) + "\n")


def read_workload(
    path: Path,
) -> tuple[list[tuple[str, int]], list[tuple[int, str, str]], dict[int, tuple[str, str]]]:
    """The workload file's lookups, ranges and last-written keys (see `write_workload`)."""
    lookups, ranges, last = [], [], {}
    for line in path.read_text().splitlines():
        kind, *fields = line.split(" ")
        if kind == "K":
            lookups.append((fields[0], int(fields[1])))
        elif kind == "R":
            ranges.append((int(fields[0]), fields[1], fields[2]))
        else:
            last[int(fields[0])] = (fields[1], fields[2])
    return lookups, ranges, last
