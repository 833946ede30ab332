"""`ExpiryTombstones`: an active replica's tombstones for the windows, sessions and versions
its retention dropped, written to their changelog so that compaction removes them.

A window, session or version is a changelog key of its own (`key + start`, `key + start +
end`, `key + timestamp`), and the pipeline that writes the changelog does not know which of
them a store holds, so it never deletes one: without these tombstones compaction keeps
every one ever written, and the changelog and every restore grow without bound. The active
replica knows: the follower hands it each unit, and it names what the unit expired and it
no longer holds (`HostedPartition.apply_changelog`).

Best effort, off the follower's critical path: a lost tombstone costs only disk (compaction
keeps a window it could have removed, and a replica restoring drops it as it goes), so
records are queued to librdkafka and never waited for; failed deliveries (for example no
Write permission on the changelog topic) are logged once per topic and reason. Followers
skip these records (`iqstate_kafka.format`): every replica expires the same ones itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from iqstate.position import TopicPartition
from iqstate_kafka.format import EXPIRY_HEADERS
from iqstate_kafka.settings import ClusterSettings

logger = logging.getLogger("iqstate_kafka.expiry")

PRODUCER_DEFAULTS = {"linger.ms": 50}
"""Producer settings `client_config` may override: tombstones are in no hurry."""
_CLOSE_TIMEOUT = 5.0


class ExpiryTombstones:
    """Writes expiry tombstones to changelog partitions, without waiting for them."""

    def __init__(self, cluster: ClusterSettings) -> None:
        self._cluster = cluster
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self._reported: set[tuple[str, str]] = set()

    def send(self, changelog: TopicPartition, keys: Sequence[bytes]) -> None:
        """Queue one tombstone per key on `changelog`; returns at once."""
        with self._lock:
            producer = self._ready()
            topic, partition = changelog.topic, changelog.partition
            for key in keys:
                try:
                    try:
                        producer.produce(topic, None, key, partition, headers=EXPIRY_HEADERS)
                    except BufferError:  # the local queue is full: let it drain a moment
                        producer.poll(0.1)
                        producer.produce(topic, None, key, partition, headers=EXPIRY_HEADERS)
                except BufferError:  # a restore expiring more than the queue holds
                    self._report(topic, "the producer's queue stayed full", permission=False)
                    return
                except KafkaException as exc:
                    self._report(topic, exc.args[0].str())
                    return
            producer.poll(0)

    def close(self) -> None:
        """Deliver what is queued (for a few seconds at most) and release the producer."""
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(_CLOSE_TIMEOUT)

    def _ready(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(
                self._cluster.client_settings(
                    PRODUCER_DEFAULTS,
                    **{"delivery.report.only.error": True, "on_delivery": self._delivered},
                )
            )
        return self._producer

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._report(message.topic() or "", error.str())

    def _report(self, topic: str, reason: str, *, permission: bool = True) -> None:
        if (topic, reason) in self._reported:
            return
        self._reported.add((topic, reason))
        logger.warning(
            "expiry tombstones for %s could not be written: %s. Compaction keeps the windows, "
            "sessions or versions they were for (the changelog grows; nothing is lost or "
            "served wrongly)%s",
            topic,
            reason,
            ": give the serving instances Write on the changelog topics" if permission else "",
        )
