"""How an application's stores are declared, read once from its members topic, so that
values written with another serde, type or partitioner never reach the replicas (they would
fail every read of those keys there, or read as other values).

Serving instances declare their stores in every heartbeat. A writer that is not a member
(`serving=False`, the distributed Spark sink) checks its declarations against the latest
ones when it starts, then writes them to the members topic itself under `writer/<store>`
(membership skips those keys), so that an instance starting after it is checked too: a
serving instance refuses to join where the latest writer declared a store otherwise.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from iqstate.errors import IncompatibleStateError
from iqstate_kafka.heartbeats import WRITER_KEY_PREFIX, decode
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import (
    MEMBERS_CLIENT_DEFAULTS,
    ensure_members_topic,
    members_topic,
    unavailable,
)

_DECLARATION_VERSION = 1


def declared_shapes(
    cluster: ClusterSettings, application_id: str, *, writers_only: bool = False
) -> dict[str, tuple[str, str]]:
    """Per store, the shape (`heartbeats.store_shape`) the latest declaration on the members
    topic gives it (a member's heartbeat or a writer's, or only writers' with
    `writers_only`), and who made it; empty when nobody declared it yet.
    `BrokerUnavailableError` if the cluster does not answer within its timeout."""
    topic = members_topic(application_id)
    consumer = Consumer(
        cluster.client_settings(
            {**MEMBERS_CLIENT_DEFAULTS, "group.id": f"iqstate-declarations-{application_id}"},
            **{"enable.auto.commit": False, "enable.auto.offset.store": False},
        )
    )
    try:
        found = consumer.list_topics(topic, timeout=cluster.timeout).topics.get(topic)
        if found is None or found.error is not None:
            return {}  # no member has joined yet
        partition = KafkaTopicPartition(topic, 0)
        low, high = consumer.get_watermark_offsets(partition, timeout=cluster.timeout)
        consumer.assign([KafkaTopicPartition(topic, 0, low)])
        latest: dict[str, tuple[str, str]] = {}
        by_writers: set[str] = set()  # stores whose latest declaration is a writer's
        deadline = time.monotonic() + cluster.timeout
        position = low
        while position < high:
            if time.monotonic() > deadline:
                raise unavailable(cluster, f"reading {topic} timed out")
            for message in consumer.consume(1000, 0.2):
                if message.error() is not None:
                    continue
                position = (message.offset() or 0) + 1
                key, value = message.key(), message.value()
                if key is not None and key.startswith(WRITER_KEY_PREFIX):
                    store = key[len(WRITER_KEY_PREFIX) :].decode(errors="replace")
                    if value is None:  # a writer's declaration withdrawn (by hand)
                        if store in by_writers:
                            del latest[store]
                            by_writers.discard(store)
                        continue
                    declared = _writer_declaration(value)
                    latest.update(declared)
                    by_writers.update(declared)
                    continue
                if key is None or value is None:
                    continue  # a tombstone: the member left, its declarations stand
                if writers_only:
                    continue
                try:
                    heartbeat = decode(key.decode(), value)
                except ValueError:
                    continue  # not a heartbeat of this version: membership logs it
                for name, shape in heartbeat.shapes.items():
                    latest[name] = (shape, str(heartbeat.member.host))
                    by_writers.discard(name)
        return latest
    except KafkaException as exc:
        raise unavailable(cluster, exc.args[0]) from exc
    finally:
        consumer.close()


def _writer_declaration(value: bytes) -> dict[str, tuple[str, str]]:
    """`{store: (shape, who)}` of a writer's declaration; empty for a record of another
    version or shape (nothing to compare with)."""
    try:
        document = json.loads(value)
        if document.get("v") != _DECLARATION_VERSION:
            return {}
        return {str(document["store"]): (str(document["shape"]), str(document["by"]))}
    except (ValueError, KeyError, AttributeError, TypeError):
        return {}


def _differences(declared: Mapping[str, tuple[str, str]], shapes: Mapping[str, str]) -> list[str]:
    return [
        f"store {name!r} as {shape} here, as {declared[name][0]} by {declared[name][1]}"
        for name, shape in sorted(shapes.items())
        if name in declared and declared[name][0] != shape
    ]


def declare_as_writer(
    cluster: ClusterSettings, application_id: str, shapes: Mapping[str, str]
) -> None:
    """Refuse (`IncompatibleStateError`, naming each difference) stores declared otherwise
    than the application's latest declarations; stores nobody declared pass. Then write
    `shapes` to the members topic as this writer's declarations, for the serving
    instances that start later to check theirs against."""
    differ = _differences(declared_shapes(cluster, application_id), shapes)
    if differ:
        raise IncompatibleStateError(
            f"this writer of application {application_id!r} declares {'; '.join(differ)}: "
            "its values would fail every read of them on the serving instances; declare each "
            "store as the serving instances do"
        )
    topic = ensure_members_topic(cluster, application_id)
    who = f"a writer on {socket.gethostname()} (pid {os.getpid()})"
    failures: list[str] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(error.str())

    producer = Producer(cluster.client_settings(MEMBERS_CLIENT_DEFAULTS))
    for name, shape in sorted(shapes.items()):
        document = {"v": _DECLARATION_VERSION, "store": name, "shape": shape, "by": who}
        producer.produce(
            topic,
            key=WRITER_KEY_PREFIX + name.encode(),
            value=json.dumps(document).encode(),
            on_delivery=delivered,
        )
    if producer.flush(cluster.timeout) or failures:
        why = failures[0] if failures else "timed out"
        raise unavailable(cluster, f"declaring stores on {topic} failed: {why}")


def check_like_the_writers(
    cluster: ClusterSettings, application_id: str, shapes: Mapping[str, str]
) -> None:
    """Refuse (`IncompatibleStateError`) a serving instance declaring a store otherwise than
    the latest writer of it (`declare_as_writer`): its replicas would read that writer's
    values with another serde, or look keys up in other partitions."""
    differ = _differences(declared_shapes(cluster, application_id, writers_only=True), shapes)
    if differ:
        raise IncompatibleStateError(
            f"this instance of application {application_id!r} declares {'; '.join(differ)}: "
            "it would read that writer's values with another serde or look keys up in other "
            "partitions; declare each store as its writers do (a store declared anew needs "
            "a new application id, whose changelogs hold values of the new declaration). A "
            "writer's declaration made by mistake, before it wrote anything, is withdrawn "
            f"with a tombstone (null value) for key 'writer/<store>' on topic "
            f"{members_topic(application_id)!r}"
        )
