"""Changelog throughput on a real Kafka broker: iqstate's writer and reader against the floor of
raw confluent-kafka in the same run.

* write: `BatchWriter.write` (data records, a marker per partition, a flush that waits for
  every acknowledgement), batch after batch; floor: a raw idempotent producer writing the
  same records with the same header, flushed once per batch (the least a durable batch
  costs) and once at the end (no per-batch durability at all).
* read: `ChangelogConsumer.read` (decode, group into units) over the written changelog;
  floors: a raw consumer with `consume(10_000, 1.0)` (asking no more than remain, so it never
  waits out its timeout), with `poll()` per message, and with `poll()` then `consume(n, 0)`
  (the reader's way), touching key, value and headers.
* tail: how long after `write` returns a follower already at the end of the log has the
  batch: the reader's way versus `consume(10_000, 0.5)`.

Rounds are interleaved; the best round counts. Starts a broker (LocalBroker) unless given one.

    python bench/kafka_changelog.py [--records 200000] [--batch 1000] [--partitions 4]
        [--rounds 3] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from iqstate_kafka import (
    BatchWriter,
    ChangelogConsumer,
    ChangelogUnit,
    KafkaCluster,
    LocalBroker,
    ensure_changelog_topics,
)
from iqstate_kafka.format import batch_headers
from timing import calibration_line

from iqstate import Position, TopicPartition

STORE = "bench"
Batches = list[dict[tuple[str, int], list[tuple[bytes, bytes | None]]]]


def make_batches(records: int, batch: int, partitions: int) -> Batches:
    """`records` writes of 16-byte keys and 100-byte values, `batch` per batch."""
    batches: Batches = []
    for start in range(0, records, batch):
        entries: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = {}
        for number in range(start, min(start + batch, records)):
            key = b"key-%012d" % number
            entries.setdefault((STORE, number % partitions), []).append((key, b"v" * 100))
        batches.append(entries)
    return batches


def topic_for(cluster: KafkaCluster, partitions: int) -> tuple[str, str]:
    application_id = f"bench-{uuid.uuid4().hex[:8]}"
    topic = ensure_changelog_topics(cluster, application_id, {STORE: partitions})[STORE]
    return application_id, topic


def write_iqstate(cluster: KafkaCluster, batches: Batches, partitions: int) -> tuple[float, str]:
    application_id, topic = topic_for(cluster, partitions)
    with BatchWriter(cluster, application_id) as writer:
        start = time.perf_counter()
        for batch_id, entries in enumerate(batches):
            source = Position.from_map({"source": {0: batch_id}})
            writer.write(entries, batch_id=batch_id, position=source, stores={STORE: partitions})
        return time.perf_counter() - start, topic


def write_raw(cluster: KafkaCluster, batches: Batches, partitions: int, flush_each: bool) -> float:
    _, topic = topic_for(cluster, partitions)
    producer = Producer(
        cluster.client_settings({"linger.ms": 5}, **{"enable.idempotence": True, "acks": "all"})
    )
    start = time.perf_counter()
    for batch_id, entries in enumerate(batches):
        headers = batch_headers(batch_id)
        for (_, partition), records in entries.items():
            for key, value in records:
                while True:
                    try:
                        producer.produce(topic, value, key, partition, headers=headers)
                        break
                    except BufferError:
                        producer.poll(0.05)
        if flush_each:
            producer.flush()
    producer.flush()
    return time.perf_counter() - start


@contextmanager
def raw_consumer(cluster: KafkaCluster, topic: str, partitions: int) -> Iterator[Consumer]:
    consumer = Consumer(
        cluster.client_settings(**{"group.id": "bench", "enable.auto.commit": False})
    )
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        yield consumer
    finally:
        consumer.close()


def touch(message: Message) -> None:
    message.key()
    message.value()
    message.headers()


def read_raw(cluster: KafkaCluster, topic: str, partitions: int, total: int, mode: str) -> float:
    with raw_consumer(cluster, topic, partitions) as consumer:
        seen = 0
        start = time.perf_counter()
        while seen < total:
            if mode == "consume":  # never more than remain: the last call must not wait
                messages = consumer.consume(min(10_000, total - seen), 1.0)
            else:
                first = consumer.poll(1.0)
                if first is None:
                    continue
                messages = [first]
                if mode == "poll+consume":
                    messages += consumer.consume(9_999, 0)
            for message in messages:
                touch(message)
            seen += len(messages)
        return time.perf_counter() - start


def read_iqstate(cluster: KafkaCluster, topic: str, partitions: int, batches: int) -> float:
    with ChangelogConsumer(cluster) as reader:
        for partition in range(partitions):
            reader.assign(TopicPartition(topic, partition), None)
        units = 0
        start = time.perf_counter()
        while units < batches * partitions:
            units += sum(isinstance(event, ChangelogUnit) for event in reader.read(1.0))
        return time.perf_counter() - start


def write_one(writer: BatchWriter, batch_id: int, stores: dict[str, int]) -> None:
    writer.write({(STORE, 0): [(b"k", b"v")]}, batch_id=batch_id, position=None, stores=stores)


def tail_latency(cluster: KafkaCluster, partitions: int, probes: int, mode: str) -> list[float]:
    """Seconds from `write` returning to a follower at the log's end holding the batch."""
    application_id, topic = topic_for(cluster, partitions)
    stores = {STORE: partitions}
    latencies = []
    with BatchWriter(cluster, application_id) as writer:
        if mode == "reader":
            with ChangelogConsumer(cluster) as reader:
                reader.assign(TopicPartition(topic, 0), None)
                reader.read(0.5)
                for batch_id in range(probes):
                    write_one(writer, batch_id, stores)
                    done = time.perf_counter()
                    while not reader.read(2.0):
                        pass
                    latencies.append(time.perf_counter() - done)
        else:
            with raw_consumer(cluster, topic, 1) as consumer:
                consumer.consume(10_000, 0.5)
                for batch_id in range(probes):
                    write_one(writer, batch_id, stores)
                    done = time.perf_counter()
                    while not consumer.consume(10_000, 0.5):
                        pass
                    latencies.append(time.perf_counter() - done)
    return latencies


def best(rounds: list[dict[str, float]], name: str) -> float:
    return min(round_[name] for round_ in rounds)


def report(cluster: KafkaCluster, args: argparse.Namespace) -> None:
    batches = make_batches(args.records, args.batch, args.partitions)
    markers = len(batches) * args.partitions
    total = args.records + markers
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        times: dict[str, float] = {}
        times["write raw, one flush"] = write_raw(cluster, batches, args.partitions, False)
        times["write raw, flush per batch"] = write_raw(cluster, batches, args.partitions, True)
        times["write BatchWriter"], topic = write_iqstate(cluster, batches, args.partitions)
        for mode in ("consume", "poll", "poll+consume"):
            times[f"read raw {mode}"] = read_raw(cluster, topic, args.partitions, total, mode)
        times["read ChangelogConsumer"] = read_iqstate(
            cluster, topic, args.partitions, len(batches)
        )
        rounds.append(times)

    print(calibration_line())
    print(
        f"{args.records:,} records (16 B keys, 100 B values) in batches of {args.batch:,} over "
        f"{args.partitions} partitions (+{markers:,} markers); best of {args.rounds} rounds"
    )
    write_floor = best(rounds, "write raw, flush per batch")
    for name in ("write raw, one flush", "write raw, flush per batch", "write BatchWriter"):
        rate = args.records / best(rounds, name)
        print(
            f"  {name:28s} {rate:>10,.0f} records/s  {write_floor / best(rounds, name):.2f}x floor"
        )
    read_floor = min(
        best(rounds, f"read raw {mode}") for mode in ("consume", "poll", "poll+consume")
    )
    for name in (
        "read raw consume",
        "read raw poll",
        "read raw poll+consume",
        "read ChangelogConsumer",
    ):
        rate = total / best(rounds, name)
        print(
            f"  {name:28s} {rate:>10,.0f} records/s  {read_floor / best(rounds, name):.2f}x floor"
        )
    for mode, label in (
        ("reader", "ChangelogConsumer.read(2.0)"),
        ("consume", "consume(10000, 0.5)"),
    ):
        latencies = tail_latency(cluster, args.partitions, args.probes, mode)
        print(
            f"  tail, {label:26s} p50 {statistics.median(latencies) * 1000:7.1f} ms  "
            f"max {max(latencies) * 1000:7.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    args = parser.parse_args()
    if args.bootstrap:
        report(KafkaCluster(args.bootstrap, timeout=30.0), args)
        return
    with LocalBroker() as broker:
        report(KafkaCluster(broker.bootstrap_servers, timeout=30.0), args)


if __name__ == "__main__":
    main()
