"""`BatchWriter`: writes one batch to the changelogs and returns once all of it is durable.

Per batch: every data record to exactly its store partition's changelog partition, a flush
(every record delivered), then one batch marker on every changelog partition of every store
the batch covers (partitions without data too: the position advances everywhere, SPEC 3.3),
then a flush. No marker is written after a record that was not delivered: it would make
followers apply the batch without it, and fence the replay that restores it. `write`
returns only when the cluster acknowledged every record (`acks=all`); any delivery failure or
timeout raises `DeliveryError`, and the producer is replaced, so nothing is reported done that
is not durable.

**Idempotent producer, no transactions.** The idempotent producer (`enable.idempotence`)
keeps each partition's records in order and free of the duplicates its own retries would
make, which is what puts a batch's marker after that batch's data. Kafka transactions would
add two things, and neither is worth its cost here:
- Atomic visibility across partitions for `read_committed` readers. iqstate promises
  atomicity per store partition (a partition's position advances at its marker), and a
  follower applies a partition up to a marker or not at all, which is the same guarantee.
- Hiding a failed attempt's records. A failed batch is replayed with the same batch id
  (Spark replays a micro-batch; `begin_batch` refuses to skip a batch id), and the follower
  applies everything before the replay's marker, so the replay overwrites the attempt;
  a batch already applied is skipped through its batch id (the fence).
And they cost: a producer-wide `init_transactions` round trip, a commit per batch that writes
a control record to every partition (as many records as the markers), `read_committed`
followers that see nothing before the commit, and `transactional.id` fencing to manage. Above
all, a transaction belongs to one producer: Spark's executors write a micro-batch from many
producers, which one transaction cannot span (KIP-939 is not in librdkafka), so markers are
needed for distributed Spark anyway. What transactions would hide is a batch abandoned
without replay (allowed only with `allow_gaps`; the next batch's markers carry the
allow-gaps header, so followers accept the skipped batch id): its written records are in
the log, and followers reading them between markers do not apply them, since a data record
belongs to the batch its header names and that batch never gets a marker
(`iqstate_kafka.applying`); but a replica rebuilt through the compacted part of the log,
where the markers are gone, or one that applied the batch in parts past
`max_held_records`, does (docs/cluster.md, Security).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from iqstate.position import Position, TopicPartition
from iqstate_kafka.errors import DeliveryError
from iqstate_kafka.format import (
    MARKER_KEY,
    batch_headers,
    data_key,
    marker_headers,
    marker_value,
    window_data_key,
)
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import changelog_topics

Entry = tuple[bytes, bytes | None] | tuple[bytes, int, bytes | None]
"""`(key, value)` for a key-value store, `(key, window_start, value)` for a window store;
serialized, `None` value = delete (the shape of `Batch.pending()` in core)."""

Headers = list[tuple[str, str | bytes | None]]

PRODUCER_DEFAULTS: Mapping[str, Any] = {"linger.ms": 5}
"""Producer settings `client_config` may override: a short linger batches records."""

_SHOWN_FAILURES = 5


def _checked_topic(
    topics: Mapping[str, str], stores: Mapping[str, int], store: str, partition: int
) -> str:
    """The changelog topic of `store`, once `partition` is known to exist there."""
    if store not in stores:
        raise ValueError(
            f"the batch writes to store {store!r}, which is not among the stores it "
            f"covers ({', '.join(sorted(stores))}); nothing of the batch counts as written"
        )
    if (
        isinstance(partition, bool)
        or not isinstance(partition, int)
        or not 0 <= partition < stores[store]
    ):
        raise ValueError(
            f"the batch writes to store {store!r} partition {partition!r}, which does "
            f"not exist (the store has {stores[store]}); nothing of the batch counts as written"
        )
    return topics[store]


class BatchWriter:
    """Writes batches of one application to its stores' changelogs, one batch at a time.

    `delivery_timeout` (seconds) bounds how long a record may wait for its acknowledgement,
    retries included (librdkafka's `message.timeout.ms`), so a broker that restarts within
    it costs nothing and one that does not makes `write` fail instead of hang.
    `data_only=True` makes a writer for `write_data` alone (a Spark task's): its producer
    reports failed deliveries only, which spares a callback per record.
    """

    def __init__(
        self,
        cluster: ClusterSettings,
        application_id: str,
        *,
        delivery_timeout: float = 30.0,
        data_only: bool = False,
    ) -> None:
        if not delivery_timeout > 0:
            raise ValueError(f"delivery_timeout must be > 0 seconds, got {delivery_timeout!r}")
        self._data_only = data_only
        self._cluster = cluster
        self._application_id = application_id
        self._delivery_timeout = delivery_timeout
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self._failures: list[str] = []
        self._failed = 0
        self._ends: dict[TopicPartition, int] = {}
        self._batch_id: int | None = None

    def write(
        self,
        entries: Mapping[tuple[str, int], Sequence[Entry]],
        *,
        batch_id: int | None,
        position: Position | None,
        stores: Mapping[str, int],
        allow_gaps: bool = False,
    ) -> dict[TopicPartition, int]:
        """Write one batch; return each marker's changelog partition and the offset after it.

        `entries`: the serialized writes by `(store, partition)`, in order; `stores`: every
        store the batch covers (name -> partitions), each of which gets a marker with
        `batch_id` and `position` on each of its changelog partitions. The returned offsets
        are what a replica that applied the batch commits (`iqstate_kafka.reader`).
        `allow_gaps`: `batch_id` may skip ids after the last batch (followers refuse a
        marker that skips ahead of their fence otherwise).
        """
        topics = changelog_topics(self._application_id, stores)
        for store, partition in entries:  # all checked before anything is sent
            _checked_topic(topics, stores, store, partition)
        if self._data_only:
            raise ValueError("this BatchWriter was made with data_only=True: it writes no markers")
        marker = marker_value(batch_id, position if position is not None else Position.empty())
        self._send(entries.items(), batch_id, stores, marker, marker_headers(allow_gaps))
        return dict(self._ends)

    def write_data(
        self,
        chunks: Iterable[tuple[tuple[str, int], Sequence[Entry]]],
        *,
        batch_id: int,
        stores: Mapping[str, int],
    ) -> int:
        """Write data records of batch `batch_id` without markers; return once all are durable.

        For a batch written by several processes (Spark's executors): each writes its share
        of the data with `write_data`, and once all of them returned, one process writes the
        markers with `write({}, ...)`. `chunks` may be a generator: each `((store,
        partition), entries)` is produced as it comes, and one flush at the end waits for all.
        Returns how many records were written.
        """
        return self._send(chunks, batch_id, stores, None)

    def _send(
        self,
        chunks: Iterable[tuple[tuple[str, int], Sequence[Entry]]],
        batch_id: int | None,
        stores: Mapping[str, int],
        marker: bytes | None,
        marker_header: Headers | None = None,
    ) -> int:
        topics = changelog_topics(self._application_id, stores)
        headers: Headers = list(batch_headers(batch_id))
        written = 0
        with self._lock:
            self._batch_id = batch_id
            producer = self._ready_producer()
            try:
                produce = producer.produce
                for (store, partition), records in chunks:
                    topic = _checked_topic(topics, stores, store, partition)
                    for entry in records:
                        if len(entry) == 3:
                            raw, window_start, value = entry
                            key = window_data_key(raw, window_start)
                        else:
                            raw, value = entry
                            key = raw if raw != MARKER_KEY else data_key(raw)
                        try:  # the common case inline: this loop runs once per record
                            produce(topic, value, key, partition, headers=headers)
                        except (BufferError, KafkaException):
                            self._produce(producer, topic, key, value, partition, headers)
                    written += len(records)
                if marker is not None:
                    if written:
                        # Every record delivered before any marker: the idempotent producer
                        # keeps order but not every record (one that timed out in the queue,
                        # a record batch the broker refused), and a marker after a lost
                        # record would fence the replay that could restore it.
                        self._flush(producer)
                    for store, partitions in stores.items():
                        for partition in range(partitions):
                            self._produce(
                                producer, topics[store], MARKER_KEY, marker, partition,
                                marker_header,
                            )  # fmt: skip
                self._flush(producer)
            except BaseException:
                self._discard(producer)
                raise
        return written

    def _flush(self, producer: Producer) -> None:
        """Wait until everything produced is delivered; `DeliveryError` when some was not."""
        remaining = producer.flush(self._delivery_timeout + self._cluster.timeout)
        if remaining or self._failed:
            raise self._error(remaining)

    def close(self) -> None:
        """Release the producer (there is never anything unsent between batches)."""
        with self._lock:
            if self._producer is not None:
                self._producer.flush(0)
                self._producer = None

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _ready_producer(self) -> Producer:
        self._failures.clear()
        self._failed = 0
        self._ends.clear()
        if self._producer is None:
            self._producer = Producer(
                self._cluster.client_settings(
                    PRODUCER_DEFAULTS,
                    **{
                        "enable.idempotence": True,
                        "acks": "all",
                        "message.timeout.ms": max(1, round(self._delivery_timeout * 1000)),
                        "on_delivery": self._delivered,
                        "delivery.report.only.error": self._data_only,
                    },
                )
            )
        return self._producer

    def _produce(
        self,
        producer: Producer,
        topic: str,
        key: bytes,
        value: bytes | None,
        partition: int,
        headers: Headers | None,
    ) -> None:
        while True:
            try:
                producer.produce(topic, value, key, partition, headers=headers)
                return
            except BufferError:
                # The local queue is full: serve delivery reports until there is room.
                producer.poll(0.1)
                if self._failed:
                    raise self._error(0) from None
            except KafkaException as exc:  # refused before sending, e.g. a record too large
                raise DeliveryError(
                    f"batch {self._batch_id}: a record of {len(key)}-byte key and "
                    f"{len(value or b'')}-byte value for {topic} partition {partition} was "
                    f"refused: {exc.args[0].str()}; nothing of the batch counts as written"
                ) from exc

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._failed += 1
            if len(self._failures) < _SHOWN_FAILURES:
                self._failures.append(
                    f"{message.topic()} partition {message.partition()}: {error.str()}"
                )
        elif message.key() == MARKER_KEY:
            offset = message.offset()
            if offset is not None:
                tp = TopicPartition(message.topic() or "", message.partition() or 0)
                self._ends[tp] = offset + 1

    def _error(self, remaining: int) -> DeliveryError:
        parts = []
        if self._failed:
            parts.append(f"{self._failed} records failed ({'; '.join(self._failures)})")
        if remaining:
            parts.append(
                f"{remaining} records were not acknowledged within "
                f"{self._delivery_timeout + self._cluster.timeout:g} s"
            )
        return DeliveryError(
            f"batch {self._batch_id} is not durable in the changelogs of application "
            f"{self._application_id!r} at {self._cluster.bootstrap_servers}: "
            f"{' and '.join(parts)}; replay the batch with the same batch id"
        )

    def _discard(self, producer: Producer) -> None:
        """Drop a producer after a failure, with what it still queued (records already in
        flight may land; a replay of the batch overwrites them)."""
        producer.purge()
        producer.flush(0)
        self._producer = None
