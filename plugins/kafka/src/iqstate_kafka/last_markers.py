"""Where a writer's next batch must follow: the last batch marker in each changelog partition.

A follower refuses a marker whose batch id skips ahead of the last one it applied (SPEC 6's
gap rule, `iqstate_kafka.applying`), and every later batch with it. A writer that is not a
replica cannot see that (its batches return as usual), so `NextBatchCheck` reads the last
marker of each changelog partition a writer covers, once per partition (the tail of the log:
a marker ends every batch, so only a batch written without one lies after it), then follows
the batches it writes itself, and refuses a batch id the followers would refuse with the
`BatchGapError` an embedded application raises. Other writers may write the same changelogs
(serving instances, a replay): before refusing, it reads the tails again.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from iqstate.errors import BatchGapError
from iqstate.position import TopicPartition
from iqstate_kafka.errors import ChangelogFormatError
from iqstate_kafka.format import MARKER_KEY, BatchMarker, decode
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import changelog_topics, unavailable

WINDOW = 500
"""Records read at a time, backwards from the end of a partition, looking for its last marker."""


def last_batch_ids(
    cluster: ClusterSettings, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """The batch id of the last marker in each changelog partition (`None`: no marker, or
    one without a batch id). `BrokerUnavailableError` if the cluster does not answer."""
    consumer = Consumer(
        cluster.client_settings(
            {"group.id": "iqstate-last-markers"},
            **{"enable.auto.commit": False, "enable.auto.offset.store": False},
        )
    )
    try:
        lows: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] = {}  # where the part still to read ends
        for tp in partitions:
            low, high = consumer.get_watermark_offsets(
                KafkaTopicPartition(tp.topic, tp.partition), timeout=cluster.timeout
            )
            lows[tp], ends[tp] = low, high
        found: dict[TopicPartition, int | None] = {}
        deadline = time.monotonic() + cluster.timeout
        while ends:
            starts = {tp: max(lows[tp], end - WINDOW) for tp, end in ends.items()}
            read = _last_markers(consumer, starts, ends, cluster, deadline)
            following = {}
            for tp in ends:
                if tp in read:
                    found[tp] = read[tp].batch_id
                elif starts[tp] <= lows[tp]:
                    found[tp] = None  # the whole partition read: no marker
                else:
                    following[tp] = starts[tp]
            ends = following
        return found
    finally:
        consumer.close()


def _last_markers(
    consumer: Consumer,
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    cluster: ClusterSettings,
    deadline: float,
) -> dict[TopicPartition, BatchMarker]:
    """The last marker in `[start, end)` of each partition, where there is one."""
    waiting = {tp for tp in starts if starts[tp] < ends[tp]}
    consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, starts[tp]) for tp in waiting])
    markers: dict[TopicPartition, BatchMarker] = {}
    while waiting:
        if time.monotonic() > deadline:
            raise unavailable(cluster, "reading the changelogs' last batch markers timed out")
        for message in consumer.consume(1000, 0.2):
            if message.error() is not None:
                continue
            tp = TopicPartition(message.topic() or "", message.partition() or 0)
            offset = message.offset() or 0
            if tp not in waiting or offset >= ends[tp]:
                waiting.discard(tp)  # compaction may have taken the window's last offset
                continue
            if offset >= ends[tp] - 1:
                waiting.discard(tp)
            if message.key() == MARKER_KEY:
                try:
                    record = decode(tp.topic, tp.partition, offset, message.key(),
                                    message.value(), message.headers() or [])  # fmt: skip
                except ChangelogFormatError:
                    continue  # not a marker a follower would apply either
                if isinstance(record, BatchMarker):
                    markers[tp] = record
    return markers


class NextBatchCheck:
    """Refuses a batch whose id the changelogs' followers would refuse as a gap."""

    def __init__(self, cluster: ClusterSettings, application_id: str) -> None:
        self._cluster = cluster
        self._application_id = application_id
        self._last: dict[TopicPartition, int | None] = {}
        """Per changelog partition, the last batch id it holds (read once, then written)."""

    def check(self, batch_id: int | None, stores: Mapping[str, int], allow_gaps: bool) -> None:
        """Raise `BatchGapError` if `batch_id` skips ahead of the last batch of a changelog
        partition of `stores` (name -> partitions), unless `allow_gaps`. Nothing is written."""
        if batch_id is None or allow_gaps:
            return
        covered = self._partitions(stores)
        unknown = [tp for tp in covered if tp not in self._last]
        if unknown:
            self._last.update(last_batch_ids(self._cluster, unknown))
        skipped = self._skipped(batch_id, covered)
        if skipped:  # another writer may have written since: read again before refusing
            self._last.update(last_batch_ids(self._cluster, skipped))
            skipped = self._skipped(batch_id, covered)
        if skipped:
            raise BatchGapError(_gap_message(batch_id, skipped))

    def _skipped(self, batch_id: int, covered: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The partitions whose last batch `batch_id` skips ahead of, with that batch."""
        skipped = {}
        for tp in covered:
            last = self._last[tp]
            if last is not None and batch_id > last + 1:
                skipped[tp] = last
        return skipped

    def written(self, batch_id: int | None, stores: Mapping[str, int]) -> None:
        """Note a batch written whole: its markers end every changelog partition of `stores`."""
        if batch_id is None:
            return
        for tp in self._partitions(stores):
            last = self._last.get(tp)
            self._last[tp] = batch_id if last is None else max(last, batch_id)

    def _partitions(self, stores: Mapping[str, int]) -> list[TopicPartition]:
        topics = changelog_topics(self._application_id, stores)
        return [TopicPartition(topics[name], p) for name in stores for p in range(stores[name])]


def _gap_message(batch_id: int, skipped: Mapping[TopicPartition, int]) -> str:
    lasts = sorted(set(skipped.values()))
    shown = ", ".join(f"{tp.topic} partition {tp.partition}" for tp in list(skipped)[:3])
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return (
        f"batch {batch_id} skips batches: the changelogs' last batch is "
        f"{' to '.join(map(str, lasts))} on {shown}{more}, and every replica would refuse "
        f"this batch and every later one. Write batch {min(lasts) + 1} next (a restarted "
        "writer goes on from the last batch), or pass allow_gaps=True if the batch ids are "
        "not consecutive. Nothing was written"
    )
