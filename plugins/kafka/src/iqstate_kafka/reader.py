"""`ChangelogConsumer`: reads changelog partitions with a Kafka consumer and hands a follower
units it can apply atomically. (Core's `iqstate.changelog.ChangelogReader` is another thing:
a changelog a store partition restores from, read to its end in one call.)

A unit is a partition's data records up to a batch marker, that marker (batch id and source
position) and the offset after it. Data after a partition's last marker is held until its
marker arrives, so a follower that applies a unit and commits it in one store commit shows
a partition before or after a batch, never inside one. Records of a batch already applied
are recognisable through their batch ids (`ChangelogUnit.entries(fence)`,
`ChangelogUnit.fenced(fence)`, the runtime's rule that a batch at or below the fence is
skipped).

**The committed changelog offset** (KIP-1035, what a replica commits inside its store with
its data) is *the offset of the next record to read*: after applying a unit, its
`next_offset` (the marker's offset + 1). This is what the runtime already commits for its
in-memory changelog and what Kafka consumers commit. Kafka Streams' `.checkpoint` keeps the
last applied offset instead and seeks to it + 1; iqstate stores that + 1. So: no committed
offset means read from the earliest offset; a committed offset `c` is valid iff
`earliest <= c <= end` (`Watermarks.contains`), `c == end` means caught up, and the lag is
`end - c` offsets (markers and duplicates count). An offset outside the range (the topic was
recreated, or retention deleted what the replica had not read) cannot be resumed: the
replica must be rebuilt from the earliest offset.

**Held data is bounded twice.** Compaction keeps only a partition's latest marker, so the
compacted part of a changelog holds data without markers: reading it from the start would
hold all of it until the next marker. Where offsets are missing since a partition's last
marker (compaction removed records, markers with them), its held data is handed out every
`compacted_unit_records` as an *incomplete* unit (no marker), which a rebuilding replica
applies without advancing its position or fence: the markers in between are gone, so the
replica is restoring history, not following a batch. (Offsets also go missing where
compaction thinned a batch's own repeated keys, or where a foreign writer's transaction
committed: such a stretch is treated the same way.) A stretch without missing offsets is a
batch still being written (or one abandoned before its marker), and is held whole until
its marker, however large, so that the batch is applied in one commit. `max_held_records`
bounds what all partitions hold together: when one more record would pass it, the
partition holding the most hands its held data out incomplete, with a warning, and queries
can see part of that batch until its marker (`None`: no bound).

**consume vs poll.** Measured on the real broker (bench/kafka_changelog.py, loopback, two
cores, 200,000 records over 4 partitions, librdkafka's default `fetch.queue.backoff.ms` of
1 s, which later turned out to be what bounded them; the follower sets 10 ms,
`iqstate_kafka.follower.CONSUMER_DEFAULTS`): the fetch rate bounds all of them, so
draining partitions with `consume(10_000, t)` (asking no more than remain), with `poll()`
per message, or with `poll()` then `consume(n, 0)` runs at the same rate (166k, 171k and
163k records/s). With librdkafka 2.16 `poll()` costs about 1 us a message even from a
prefilled queue, so the large advantage of `consume` sometimes reported does not show. What
differs is latency at the end of the log: `consume(n, t)` returns only when it has `n`
messages or `t` has passed, so a follower at the tail waits out `t` for every batch (500 ms
p50 with `t` = 0.5 s, against 0.1 ms for this reader). `read` therefore blocks in
`poll(timeout)` for the first message and then takes what is already fetched with
`consume(n, 0)`, up to `max_records` in all (in chunks: `_CHUNK`): batches while catching
up, no added latency at the tail. The reader runs at 0.91x the fastest raw loop (156k
records/s), decoding and grouping included.

Not thread-safe: one thread reads.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NamedTuple, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from iqstate.position import TopicPartition
from iqstate_kafka.errors import BrokerUnavailableError, ChangelogFormatError, ClusterError
from iqstate_kafka.format import (
    UNKNOWN,
    BatchMarker,
    DataRecord,
    ExpiryTombstone,
    decode,
    is_fenced,
    known_batch_id,
)
from iqstate_kafka.settings import DEFAULT_MAX_HELD_RECORDS, ClusterSettings

logger = logging.getLogger("iqstate_kafka.reader")

CONSUMER_DEFAULTS: dict[str, Any] = {"group.id": "iqstate-changelog-reader"}
"""Consumer settings `client_config` may override. The group id is never used to commit or
subscribe (partitions are assigned explicitly), librdkafka only requires one."""

_CHUNK = 100
"""Messages taken from the consumer per call within one `read`. confluent-kafka's messages
are objects the garbage collector tracks: a list of them that outlives the young
collections its own processing causes is moved to the oldest generation and makes a full
collection (a walk over the whole heap) due. Measured restoring 1M records into RocksDB
(the follower's reads of 50,000): in one list, 43 full collections, 1 s of a 3.5-4 s
restore; in chunks of 500, 30 (0.35 s); of 100, 5 (0.06 s), 250-284k -> 358-414k
records/s; chunks of 50 were no faster."""


class Watermarks(NamedTuple):
    """A changelog partition's offset range: `earliest` still in the log, `end` = next to come."""

    earliest: int
    end: int

    def contains(self, committed: int) -> bool:
        """True iff a replica that committed `committed` can resume from it."""
        return self.earliest <= committed <= self.end

    def lag(self, committed: int | None) -> int:
        """Offsets between `committed` (`None`: nothing) and the end."""
        return max(0, self.end - (committed if committed is not None else self.earliest))


@dataclass(frozen=True, slots=True)
class ChangelogUnit:
    """What a follower applies in one store commit, then commits `next_offset` with.

    The data records are held column by column (`pairs`, `batch_ids`, `offsets`: the i-th
    record's `(key, value)`, batch id and offset), not as one `DataRecord` each: a replica
    restoring millions of records spends less per record, and a unit whose records all
    belong to its marker's batch is applied as `pairs` as it is (`iqstate_kafka.applying`).
    `marker` is the batch marker that ends the unit, `None` for an incomplete unit (part of
    a compacted stretch, or of a batch that outgrew `max_held_records`): apply its data, but
    not a position or fence.
    """

    partition: TopicPartition
    pairs: list[tuple[bytes, bytes | None]]
    batch_ids: list[int | None]
    offsets: list[int]
    marker: BatchMarker | None
    next_offset: int
    compacted: bool = False
    """Offsets are missing between the partition's previous marker (or where reading
    started) and this unit's end: compaction removed records there, markers included, so
    batch ids may skip ahead legitimately (`iqstate_kafka.applying`)."""

    @classmethod
    def of(
        cls,
        partition: TopicPartition,
        records: Sequence[DataRecord],
        marker: BatchMarker | None,
        next_offset: int,
        compacted: bool = False,
    ) -> ChangelogUnit:
        """The unit of `records` (in order), ended by `marker`."""
        return cls(
            partition,
            [(record.key, record.value) for record in records],
            [record.batch_id for record in records],
            [record.offset for record in records],
            marker,
            next_offset,
            compacted,
        )

    @property
    def records(self) -> list[DataRecord]:
        """The data records, in order."""
        return [
            DataRecord(key, value, batch_id, offset)
            for (key, value), batch_id, offset in zip(
                self.pairs, self.batch_ids, self.offsets, strict=True
            )
        ]

    def all_of_batch(self, batch_id: int | None) -> bool:
        """True iff every data record belongs to batch `batch_id` (none: true)."""
        return self.batch_ids.count(batch_id) == len(self.batch_ids)

    def fenced(self, fence: int | None) -> bool:
        """True iff the unit's batch was applied already where the fence is `fence`."""
        return self.marker is not None and is_fenced(self.marker.batch_id, fence)

    def unfenced(self, fence: int | None) -> list[DataRecord]:
        """The records of batches after `fence` (the others are replays), in order."""
        return [record for record in self.records if not is_fenced(record.batch_id, fence)]

    def entries(self, fence: int | None) -> list[tuple[bytes, bytes | None]]:
        """`(key, value)` of the records to apply: those of batches after `fence`, in order."""
        if fence is None or not any(is_fenced(batch_id, fence) for batch_id in self.batch_ids):
            return list(self.pairs)
        return [(record.key, record.value) for record in self.unfenced(fence)]


def _looked_back(state: _Partition, message: Message) -> bool:
    """Learn from `message`, the first read of a partition assigned with `look_back`,
    whether reading resumes inside a stretch; True if it is the record looked back at."""
    state.looking_back = False
    if (message.offset() or 0) >= state.next_offset:
        state.holes = True  # the record before is gone: compaction removed it
        return False
    key, headers = message.key(), message.headers()
    if known_batch_id(key, headers) is UNKNOWN:
        try:
            record = decode(
                message.topic() or "", message.partition() or 0, message.offset() or 0,
                key, message.value(), headers,
            )  # fmt: skip
        except ChangelogFormatError:  # skipped, then a unit was cut after it
            state.holes = True
            return True
        if isinstance(record, BatchMarker):
            return True
    state.holes = True  # a data record: the replica stopped inside a stretch
    return True


@dataclass(frozen=True, slots=True)
class OffsetOutOfRange:
    """A partition's next offset is not in its log any more: rebuild, then `assign` again.

    The reader has stopped reading the partition (it is no longer assigned).
    """

    partition: TopicPartition
    offset: int


@dataclass(slots=True)
class _Partition:
    partition: TopicPartition
    next_offset: int
    pairs: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    batch_ids: list[int | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    skipped: int = 0
    holes: bool = False
    """An offset was missing since the last marker read (compaction)."""
    cut: bool = False
    """Data of the batch being read was handed out without its marker (`max_held_records`)."""
    looking_back: bool = False
    """The record before `next_offset` is read first, to learn whether reading resumes
    inside a stretch (`ChangelogConsumer.assign`); it is not held."""

    def hand_out(self, marker: BatchMarker | None, next_offset: int) -> ChangelogUnit:
        """The unit of the data held, ended by `marker`; nothing is held afterwards."""
        unit = ChangelogUnit(
            self.partition,
            self.pairs,
            self.batch_ids,
            self.offsets,
            marker,
            next_offset,
            self.holes,
        )
        self.pairs, self.batch_ids, self.offsets = [], [], []
        return unit


class ChangelogReading(Protocol):
    """What a follower reads changelogs with: a `ChangelogConsumer`, or one whose reading
    happens in worker processes (`iqstate_kafka.reader_processes`)."""

    @property
    def assignment(self) -> frozenset[TopicPartition]: ...

    def assign(
        self, partition: TopicPartition, offset: int, *, look_back: bool = False
    ) -> None: ...

    def unassign(self, partition: TopicPartition) -> None: ...

    def skipped(self, partition: TopicPartition) -> int: ...

    def position(self, partition: TopicPartition) -> int | None: ...

    def settled(self, partition: TopicPartition) -> int | None: ...

    def read(self, timeout: float) -> list[ChangelogUnit | OffsetOutOfRange]: ...

    def close(self) -> None: ...


class ChangelogConsumer:
    """Reads assigned changelog partitions in batches and groups them into units.

    `max_records`: at most this many records per `read`. `max_held_records`: data records
    held by all partitions together, waiting for their markers; one more and the partition
    holding the most hands its held data out as an incomplete unit (`None`: unbounded).
    `compacted_unit_records`: data records of a compacted stretch handed out at a time.
    """

    def __init__(
        self,
        cluster: ClusterSettings,
        *,
        max_records: int = 10_000,
        max_held_records: int | None = DEFAULT_MAX_HELD_RECORDS,
        compacted_unit_records: int = 100_000,
    ) -> None:
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records!r}")
        if max_held_records is not None and max_held_records < 1:
            raise ValueError(f"max_held_records must be >= 1 or None, got {max_held_records!r}")
        if compacted_unit_records < 1:
            raise ValueError(f"compacted_unit_records must be >= 1, got {compacted_unit_records!r}")
        self._cluster = cluster
        self._max_records = max_records
        self._max_held = max_held_records
        self._compacted_unit = compacted_unit_records
        self._held = 0
        """Data records held by all partitions, waiting for their markers."""
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._known_topics: set[str] = set()
        self._consumer = Consumer(
            cluster.client_settings(
                CONSUMER_DEFAULTS,
                **{
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "error",
                },
            )
        )

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(state.partition for state in self._partitions.values())

    def assign(
        self, partition: TopicPartition, offset: int | None, *, look_back: bool = False
    ) -> None:
        """Read `partition` from `offset` (a committed offset; `None`: from the earliest).

        `look_back` (the record before `offset` is still in the log): read that record first,
        not to hold it but to learn where the replica stopped. After a marker, reading goes
        on as usual; after a data record, the replica committed an incomplete unit, and what
        follows is treated as the rest of a compacted stretch. Without it, a replica that
        stopped inside a stretch whose markers compaction removed would take the next
        marker for one that skips ahead of its fence and refuse it, and every later one.
        If retention removed the record before (the offset itself still in the log),
        reading goes on from the offset, as after a stretch, rather than rebuilding.
        """
        if offset is not None and offset < 0:
            raise ValueError(f"offset must be >= 0 or None, got {offset!r}")
        key = (partition.topic, partition.partition)
        if key in self._partitions:
            raise ValueError(f"{partition} is already assigned; unassign it first")
        # From the earliest offset as a number: librdkafka reads a partition assigned at
        # the logical OFFSET_BEGINNING about a third slower (measured, 200k records).
        start = self.watermarks(partition).earliest if offset is None else offset
        looking_back = look_back and start > 0
        self._consumer.incremental_assign(
            [
                KafkaTopicPartition(
                    partition.topic, partition.partition, start - 1 if looking_back else start
                )
            ]
        )
        self._partitions[key] = _Partition(partition, start, looking_back=looking_back)
        self._learn_topic(partition.topic)

    def _learn_topic(self, topic: str) -> None:
        """Ask the broker for `topic`'s leaders now, the first time it is assigned.

        A consumer that is already connected learns the leaders of a newly assigned topic
        only at librdkafka's next scan of unknown topics, once a second: measured on the
        real broker, a replica assigned its changelog waited 0.9 s for its first record
        (55 ms when the metadata is asked for at once). Best effort: if the broker does
        not answer, that scan finds the leaders later.
        """
        if topic in self._known_topics:
            return
        try:
            self._consumer.list_topics(topic, timeout=self._cluster.timeout)
        except KafkaException as exc:
            logger.debug("no metadata for %s yet (%s); librdkafka asks again", topic, exc)
            return
        self._known_topics.add(topic)

    def unassign(self, partition: TopicPartition) -> None:
        """Stop reading `partition`; the data held for it is dropped."""
        key = (partition.topic, partition.partition)
        state = self._partitions.pop(key, None)
        if state is not None:
            self._held -= len(state.pairs)
            self._consumer.incremental_unassign(
                [KafkaTopicPartition(partition.topic, partition.partition)]
            )

    def skipped(self, partition: TopicPartition) -> int:
        """How many records of `partition` did not decode and were skipped (0 if unassigned)."""
        state = self._partitions.get((partition.topic, partition.partition))
        return state.skipped if state is not None else 0

    def position(self, partition: TopicPartition) -> int | None:
        """The next offset of `partition` this reader reads (`None` if unassigned): past
        every record it has read, including skipped ones and data held for a marker."""
        state = self._partitions.get((partition.topic, partition.partition))
        return state.next_offset if state is not None else None

    def settled(self, partition: TopicPartition) -> int | None:
        """The next offset of `partition` while it holds nothing (`None` while data waits
        for its marker, or unassigned): every record before it was handed out in a unit or
        skipped (an expiry tombstone, a record that does not decode). Once those units are
        applied, the replica is as far as a commit at this offset would put it: a lag
        counts from here, not from trailing records that no unit will commit past."""
        state = self._partitions.get((partition.topic, partition.partition))
        return state.next_offset if state is not None and not state.pairs else None

    def watermarks(self, partition: TopicPartition) -> Watermarks:
        """The partition's earliest and end offsets, asked of the broker now."""
        try:
            earliest, end = self._consumer.get_watermark_offsets(
                KafkaTopicPartition(partition.topic, partition.partition),
                timeout=self._cluster.timeout,
                cached=False,
            )
        except KafkaException as exc:
            raise BrokerUnavailableError(
                f"Kafka at {self._cluster.bootstrap_servers} gave no offsets for {partition} "
                f"within {self._cluster.timeout:g} s: {exc.args[0].str()}"
            ) from exc
        return Watermarks(earliest, end)

    def read(self, timeout: float) -> list[ChangelogUnit | OffsetOutOfRange]:
        """Wait up to `timeout` seconds for records; return the units they complete.

        Returns an empty list when nothing arrived, and may return one when records arrived
        but no marker (they are held).
        """
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        events: list[ChangelogUnit | OffsetOutOfRange] = []
        self._take([first], events)
        remaining = self._max_records - 1
        while remaining > 0:
            asked = min(_CHUNK, remaining)
            try:
                messages = self._consumer.consume(asked, 0)
            except KafkaException:
                if not events:
                    raise
                return events  # what is complete goes out; the next read meets the error
            self._take(messages, events)
            if len(messages) < asked:
                break
            remaining -= asked
        return events

    def _take(
        self, messages: list[Message], events: list[ChangelogUnit | OffsetOutOfRange]
    ) -> None:
        """Hold the data of `messages` (in order) and add the units their markers end."""
        max_held = self._max_held
        compacted_unit = self._compacted_unit
        partitions = self._partitions
        held = self._held  # kept in a local on the hot path, stored back around calls
        # One pass, the cheapest per record: consecutive messages are mostly of one
        # partition, and a data record whose only header is a batch id decoded before
        # (`format.known_batch_id`) is held without the general `decode`.
        topic, number, state = "", -1, None
        for message in messages:
            error = message.error()
            if error is not None:
                self._held = held
                self._failed(message, error, events)
                held = self._held
                topic, number, state = "", -1, None  # it may have unassigned a partition
                continue
            if message.partition() != number or message.topic() != topic:
                topic, number = message.topic() or "", message.partition() or 0
                state = partitions.get((topic, number))
                # A partition's first message after `assign` always comes here.
                if state is not None and state.looking_back and _looked_back(state, message):
                    continue
            if state is None:
                continue  # fetched before its partition was unassigned
            offset = message.offset() or 0
            if offset != state.next_offset:
                state.holes = True
            state.next_offset = offset + 1
            key, value, headers = message.key(), message.value(), message.headers()
            batch_id = known_batch_id(key, headers)
            if batch_id is UNKNOWN:
                try:
                    record = decode(topic, number, offset, key, value, headers)
                except ChangelogFormatError as exc:
                    state.skipped += 1
                    logger.error("%s; skipped (%d undecodable records so far)", exc, state.skipped)
                    continue
                if isinstance(record, BatchMarker):
                    held -= len(state.pairs)
                    events.append(state.hand_out(record, offset + 1))
                    state.holes = state.cut = False
                    continue
                if isinstance(record, ExpiryTombstone):
                    continue  # for compaction: every replica expires the window itself
                batch_id = record.batch_id
            assert key is not None  # a data record (decode refuses one without a key)
            state.pairs.append((key, value))
            state.batch_ids.append(batch_id)
            state.offsets.append(offset)
            held += 1
            if state.holes and len(state.pairs) >= compacted_unit:
                held -= len(state.pairs)
                events.append(state.hand_out(None, offset + 1))
            elif max_held is not None and held > max_held:
                largest = max(partitions.values(), key=lambda other: len(other.pairs))
                cut = self._cut_short(largest, held)
                held -= len(cut.pairs)
                events.append(cut)
        self._held = held

    @staticmethod
    def _cut_short(state: _Partition, held: int) -> ChangelogUnit:
        """The incomplete unit of what `state` holds, `held` records being held in all:
        part of a batch that outgrew `max_held_records` (warned about once a batch), or of
        a compacted stretch."""
        if not state.holes and not state.cut:
            state.cut = True
            logger.warning(
                "%s: %d changelog records are held across partitions waiting for batch "
                "markers (max_held_records); the %d of batch %s in this partition are "
                "applied before its marker, so queries can see part of that batch until it "
                "ends. Write smaller batches (Spark: maxOffsetsPerTrigger) or raise "
                "max_held_records",
                state.partition,
                held,
                len(state.pairs),
                state.batch_ids[-1],
            )
        return state.hand_out(None, state.next_offset)

    def _failed(
        self,
        message: Message,
        error: KafkaError,
        events: list[ChangelogUnit | OffsetOutOfRange],
    ) -> None:
        code = error.code()
        key = (message.topic() or "", message.partition() or 0)
        state = self._partitions.get(key)
        if state is not None and code in (
            KafkaError._AUTO_OFFSET_RESET,
            KafkaError.OFFSET_OUT_OF_RANGE,
        ):
            self.unassign(state.partition)
            if state.looking_back:  # retention took the record before: read from the offset
                self.assign(state.partition, state.next_offset)
                self._partitions[key].holes = True
            else:
                events.append(OffsetOutOfRange(state.partition, state.next_offset))
        elif error.fatal():
            raise ClusterError(f"the changelog consumer failed: {error.str()}")
        else:  # transient (a broker restarting, a leader moving): librdkafka retries
            logger.warning("changelog consumer: %s", error.str())

    def close(self) -> None:
        """Close the consumer (nothing is committed to Kafka: offsets live in the stores)."""
        self._consumer.close()

    def __enter__(self) -> ChangelogConsumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
