"""`WatermarkAsker`: the earliest and end offsets of changelog partitions, asked without
blocking the follower.

The follower needs them to assign a partition (is the committed offset still in the log?),
to capture an active's target, and for lags. Asking through the follower's own consumer
(`ChangelogConsumer.watermarks`) is slow: the request queues behind the consumer's
long-polling fetch on the same connection, up to `fetch.wait.max.ms` (500 ms) per partition
at the tail (measured), so a refresh of a dozen partitions would stall the follower for
seconds. This asks through an admin client of its own, all due partitions in one
`ListOffsets` request per kind (earliest, latest), and hands the answers back when they have
arrived; a broker that does not answer costs the follower nothing but the wait for answers.

With the offsets it asks for the ids of the partitions' topics (KIP-516, one `Metadata`
request): a topic deleted and created again under its name gets a new id, which is how a
follower tells a recreated changelog from the one its replica read, whatever its offsets
(`iqstate_kafka.topic_ids`). An id the cluster does not give (a failed request, a broker
without topic ids) is unknown; the offsets are answered all the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from concurrent.futures import Future

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from iqstate.position import TopicPartition
from iqstate_kafka.reader import Watermarks
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import EARLIEST, LATEST, STALE_METADATA

WARM_UP_TIMEOUT = 1.0
"""The longest a new asker waits for the cluster's brokers before its first request."""

REPLACE_AFTER_FAILURES = 5
"""Requests in a row that failed after which the admin client is replaced by a new one."""

Answer = Watermarks | str
"""A partition's watermarks, or why the cluster gave none."""

NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
"""The all-zero id (base64) of a topic on brokers without topic ids: no id."""


class WatermarkAsker:
    """Asks for the watermarks of many partitions, and their topics' ids, at once; one
    request in flight at a time."""

    def __init__(self, cluster: ClusterSettings) -> None:
        self._cluster = cluster
        self._admin = self._new_admin()
        self._learn_brokers()
        self._failed_requests = 0
        self._stale_metadata = False
        self._earliest: dict[KafkaTopicPartition, Future[object]] = {}
        self._latest: dict[KafkaTopicPartition, Future[object]] = {}
        self._descriptions: dict[str, Future[object]] = {}
        self._topic_ids: dict[str, str] = {}

    @property
    def busy(self) -> bool:
        """True while a request is in flight (its answers not taken yet)."""
        return bool(self._earliest)

    def ask(self, partitions: Iterable[TopicPartition]) -> None:
        """Ask for the watermarks of `partitions` (nothing if a request is in flight)."""
        if self.busy:
            return
        wanted = [KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions]
        if not wanted:
            return
        timeout = self._cluster.timeout
        earliest = self._admin.list_offsets(
            {tp: EARLIEST for tp in wanted}, request_timeout=timeout
        )
        latest = self._admin.list_offsets({tp: LATEST for tp in wanted}, request_timeout=timeout)
        topics = TopicCollection(sorted({tp.topic for tp in wanted}))
        descriptions = self._admin.describe_topics(topics, request_timeout=timeout)
        # All three or none in flight:
        self._earliest, self._latest, self._descriptions = earliest, latest, descriptions

    def topic_id(self, topic: str) -> str | None:
        """The id the cluster gave `topic` with the latest answers (None: it gave none)."""
        return self._topic_ids.get(topic)

    def answers(self) -> dict[TopicPartition, Answer]:
        """The answers of the request in flight once all have arrived (then it is done),
        else nothing; `topic_id` then gives the ids that came with them."""
        # The client's librdkafka log lines wait in its queue until polled: hand them to the
        # client logger (a broker that is down would otherwise grow that queue unseen).
        self._admin.poll(0)
        futures = [*self._earliest.values(), *self._latest.values(), *self._descriptions.values()]
        if not futures or not all(future.done() for future in futures):
            return {}
        self._take_topic_ids()
        answers = {
            TopicPartition(kafka_tp.topic, kafka_tp.partition): self._answer(
                self._earliest[kafka_tp], self._latest[kafka_tp]
            )
            for kafka_tp in self._earliest
        }
        self._earliest, self._latest, self._descriptions = {}, {}, {}
        failed = any(isinstance(answer, str) for answer in answers.values())
        self._failed_requests = self._failed_requests + 1 if failed else 0
        if self._stale_metadata or self._failed_requests >= REPLACE_AFTER_FAILURES:
            # A new client asks for new metadata (`topics.STALE_METADATA` says why). Not on
            # every failure: a new client's first request may fail while it has no
            # metadata yet (measured), so replacing it each time could never succeed.
            self._admin = self._new_admin()
            self._failed_requests = 0
            self._stale_metadata = False
        return answers

    def _learn_brokers(self) -> None:
        """Let the new client learn the brokers before its first request (best effort, at
        most `WARM_UP_TIMEOUT`). Measured: a new client's first `ListOffsets` otherwise
        waited 3 s in a third of restores, because librdkafka sent its leader lookup on the
        bootstrap connection and dropped that connection (having learned the broker's id)
        before the answer, then retried after 1 + 2 s."""
        with contextlib.suppress(KafkaException):  # the first request then waits, as before
            self._admin.list_topics(timeout=min(WARM_UP_TIMEOUT, self._cluster.timeout))

    def _new_admin(self) -> AdminClient:
        return AdminClient(self._cluster.client_settings())

    def _take_topic_ids(self) -> None:
        """Keep the topic ids that arrived; forget those of topics whose ids did not."""
        for topic, future in self._descriptions.items():
            try:
                topic_id = str(future.result().topic_id)  # type: ignore[attr-defined]
            except Exception as exc:  # the id is unknown; the offsets still count
                self._note_stale_metadata(exc)
                topic_id = NO_TOPIC_ID
            if topic_id == NO_TOPIC_ID:
                self._topic_ids.pop(topic, None)
            else:
                self._topic_ids[topic] = topic_id

    def _answer(self, earliest: Future[object], latest: Future[object]) -> Answer:
        try:
            return Watermarks(_offset(earliest), _offset(latest))
        except Exception as exc:
            return self._reason(exc)

    def _reason(self, exc: Exception) -> str:
        """Why a request failed, in words; notes a client whose metadata went stale."""
        self._note_stale_metadata(exc)
        if isinstance(exc, KafkaException):
            return str(exc.args[0].str())
        if isinstance(exc, ValueError):
            return str(exc)
        return repr(exc)  # whatever else the client raises: an answer, not a crash

    def _note_stale_metadata(self, exc: Exception) -> None:
        if isinstance(exc, KafkaException):
            self._stale_metadata |= exc.args[0].code() in STALE_METADATA


def _offset(future: Future[object]) -> int:
    offset = int(future.result().offset)  # type: ignore[attr-defined]
    if offset < 0:  # librdkafka's sentinels (-1001: invalid) when no real answer came
        raise ValueError(f"the broker gave no offset (librdkafka sentinel {offset})")
    return offset
