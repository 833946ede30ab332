"""How the serving instances of an application declare its stores, read once from the
members topic: a writer that is not a member (`serving=False`) checks its own declarations
against them when it starts, so that values written with another serde, type or
partitioner never reach the replicas (they would fail every read of those keys there).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from iqstate.errors import IncompatibleStateError
from iqstate_kafka.heartbeats import decode
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import MEMBERS_CLIENT_DEFAULTS, members_topic, unavailable


def declared_shapes(cluster: ClusterSettings, application_id: str) -> dict[str, tuple[str, str]]:
    """Per store, the shape (`heartbeats.store_shape`) the latest heartbeat on the members
    topic declares it with, and that member's host; empty when no member has joined yet.
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
                if key is None or value is None:
                    continue  # a tombstone: the member left, its declarations stand
                try:
                    heartbeat = decode(key.decode(), value)
                except ValueError:
                    continue  # not a heartbeat of this version: membership logs it
                for name, shape in heartbeat.shapes.items():
                    latest[name] = (shape, str(heartbeat.member.host))
        return latest
    except KafkaException as exc:
        raise unavailable(cluster, exc.args[0]) from exc
    finally:
        consumer.close()


def check_like_the_members(
    cluster: ClusterSettings, application_id: str, shapes: Mapping[str, str]
) -> None:
    """Refuse (`IncompatibleStateError`, naming each difference) stores declared otherwise
    than the members of the application last declared them; stores no member declares
    pass (nothing to compare them with)."""
    declared = declared_shapes(cluster, application_id)
    differ = [
        f"store {name!r} as {shape} here, as {declared[name][0]} by {declared[name][1]}"
        for name, shape in sorted(shapes.items())
        if name in declared and declared[name][0] != shape
    ]
    if differ:
        raise IncompatibleStateError(
            f"this writer of application {application_id!r} declares {'; '.join(differ)}: "
            "its values would fail every read of them on the serving instances; declare each "
            "store as the serving instances do"
        )
