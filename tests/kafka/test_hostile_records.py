"""Whoever can write the topics does not own the state silently: a forged batch marker, stray
data records, a batch older than the last one and forged member records have no effect
beyond a logged refusal.

Two `iqstate serve` instances in their own processes and a writer (`serving=False`) on the
session's broker; the forgeries are written with a plain Kafka producer, as an attacker or
a broken tool would."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from iqstate_kafka import LocalBroker
from iqstate_kafka.assignor import Member
from iqstate_kafka.format import MARKER_KEY, batch_headers, marker_value
from iqstate_kafka.heartbeats import Heartbeat, encode
from iqstate_kafka.topics import members_topic
from prometheus_client.parser import text_string_to_metric_families
from serving_support import layout, serving_pair, stable, wait_for

from iqstate import Application, Position
from iqstate.runtime import partition_for_bytes
from iqstate.runtime.metadata import HostInfo

PARTITIONS = 4
KEYS = [f"key-{i:02d}" for i in range(20)]


def _write(writer: Application, batch_id: int) -> dict[str, int]:
    values = {key: batch_id * 100 + i for i, key in enumerate(KEYS)}
    with writer.begin_batch(position={"src": {0: batch_id}}, batch_id=batch_id) as batch:
        batch.put_all("counts", list(values.items()))
    return values


def _value(url: str, key: str) -> object:
    answer = httpx.get(f"{url}/v1/stores/counts/keys/{key}", timeout=5)
    assert answer.status_code == 200, answer.text
    return answer.json()["value"]


def _reads(url: str, values: dict[str, int]) -> bool:
    try:
        return all(_value(url, key) == value for key, value in values.items())
    except (httpx.HTTPError, AssertionError):
        return False


def _positions(url: str) -> set[str]:
    found = httpx.get(url + "/v1/partitions", timeout=5).json()
    return {json.dumps(entry["position"], sort_keys=True) for entry in found}


def test_forged_markers_stray_records_and_older_batches_are_refused(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app_id = unique_name("hostile")
    bootstrap = kafka_broker.bootstrap_servers
    with serving_pair(bootstrap, app_id, tmp_path, PARTITIONS) as (instances, writer):
        urls = [instance.url for instance in instances]
        first = _write(writer, 1)
        wait_for("batch 1 everywhere", lambda: all(_reads(u, first) for u in urls))

        topic = f"{app_id}-counts-changelog"
        stray_key = b"stray"
        stray_partition = partition_for_bytes(stray_key, PARTITIONS)
        forger = Producer({"bootstrap.servers": bootstrap})
        frozen = marker_value(2**63 - 1, Position.from_map({"src": {0: 999}}))
        for partition in range(PARTITIONS):
            forger.produce(topic, frozen, MARKER_KEY, partition)
        # A data record of a batch that never gets a marker, before the next legitimate one.
        forger.produce(
            topic,
            (666).to_bytes(8, "big", signed=True),
            stray_key,
            stray_partition,
            headers=batch_headers(99),
        )
        assert forger.flush(10) == 0

        second = _write(writer, 2)  # the next legitimate batch: not fenced by the forgery
        wait_for("batch 2 everywhere", lambda: all(_reads(u, second) for u in urls))
        batch_2 = json.dumps({"src": {"0": 2}}, sort_keys=True)
        for instance in instances:
            assert _value(instance.url, "stray") is None
            assert _positions(instance.url) == {batch_2}
            # A reader bounded at batch 2 is answered; one past it is not (nothing at 999).
            answer = httpx.post(
                instance.url + "/v1/query",
                json={"store": "counts", "query": {"type": "range"}, "bound": {"src": {"0": 3}}},
                timeout=5,
            ).json()
            assert {p["failure"] for p in answer["partitions"].values()} == {"NOT_UP_TO_BOUND"}
            output = instance.output()
            assert "refused (gap): batch marker 9223372036854775807 skips ahead" in output
            assert "refused (stray): a record of batch 99" in output
            # Counted where an operator looks: each instance hosts a replica of every
            # partition, so it refused every forged marker and the stray record once.
            scraped = _scrape(instance.url)
            skipped = "iqstate_changelog_records_skipped_total"
            assert scraped[(skipped, (("reason", "gap"), ("store", "counts")))] == PARTITIONS
            assert scraped[(skipped, (("reason", "stray"), ("store", "counts")))] == 1
            assert scraped[("iqstate_restored_records_total", (("store", "counts"),))] > 0
            assert scraped[("iqstate_cluster_live_instances", ())] == 2
            assert scraped[("iqstate_cluster_member", ())] == 1, "it sees itself live"
            assert scraped[("iqstate_broker_silence_seconds", ())] < 5

        # A writer whose batch ids start over (a query restarted with a new checkpoint):
        # its batch 0 after batch 2 is skipped, not applied over batch 2, and reported.
        _write(writer, 0)
        third = _write(writer, 3)
        wait_for("batch 3 everywhere", lambda: all(_reads(u, third) for u in urls))
        for instance in instances:
            assert "batch marker 0 is older than the partition's last batch 2" in instance.output()
            scraped = _scrape(instance.url)
            behind = (
                "iqstate_changelog_records_skipped_total",
                (("reason", "behind"), ("store", "counts")),
            )
            assert scraped[behind] == len(KEYS) + PARTITIONS  # its records and markers

        # A writer whose batch ids skip ahead has every later batch refused: all counted,
        # and logged once per partition and reason per 30 s, not once per record or batch.
        for batch_id in range(100, 120):
            _write(writer, batch_id)
        gap = ("iqstate_changelog_records_skipped_total", (("reason", "gap"), ("store", "counts")))
        refused = PARTITIONS + 20 * (len(KEYS) + PARTITIONS)  # the forgeries, then 20 batches
        for instance in instances:
            url = instance.url
            wait_for("every skipping batch refused", lambda: _scrape(url)[gap] == refused)  # noqa: B023
            lines = [line for line in instance.output().splitlines() if "refused (gap)" in line]
            assert 1 <= len(lines) <= 2 * PARTITIONS, "\n".join(lines)


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """`/metrics` as `{(sample name, sorted labels): value}`, read by prometheus_client's
    own parser of the text format."""
    text = httpx.get(url + "/metrics", timeout=5).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _member_ids(bootstrap: str, app_id: str) -> dict[int, str]:
    """Member id by port, from the members topic."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "iqstate-test", "enable.auto.commit": False}
    )
    try:
        topic = members_topic(app_id)
        _, end = consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=10)
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        found: dict[int, str] = {}
        read = 0
        while read < end:
            for message in consumer.consume(500, 5):
                read = message.offset() + 1
                if message.value() is not None and not message.key().startswith(b"writer/"):
                    found[json.loads(message.value())["port"]] = message.key().decode()
        return found
    finally:
        consumer.close()


def test_forged_member_records_do_not_move_partitions(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    app_id = unique_name("impostor")
    bootstrap = kafka_broker.bootstrap_servers
    with serving_pair(bootstrap, app_id, tmp_path, PARTITIONS) as (instances, _):
        urls = [instance.url for instance in instances]
        before = layout(urls, PARTITIONS)
        victim, other = instances
        ids = _member_ids(bootstrap, app_id)
        everything = frozenset(("counts", p) for p in range(PARTITIONS))
        impostor = Heartbeat(
            Member("0-impostor", HostInfo("127.0.0.1", victim.port), {}, everything),
            stores={"counts": PARTITIONS},
        )
        forger = Producer({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:  # an impostor that keeps heartbeating
            forger.produce(members_topic(app_id), encode(impostor), b"0-impostor", 0)
            forger.produce(members_topic(app_id), None, ids[other.port].encode(), 0)
            forger.flush(10)
            time.sleep(0.25)
        assert stable(urls, PARTITIONS, seconds=3.0)
        assert layout(urls, PARTITIONS) == before
        for instance in instances:
            output = instance.output()
            assert f"claims endpoint 127.0.0.1:{victim.port} of live member" in output
        assert "heartbeats after its tombstone" in victim.output()
