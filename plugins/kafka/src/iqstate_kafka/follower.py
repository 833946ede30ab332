"""`Follower`: applies the changelogs to the store partitions hosted here (SPEC 9).

One background thread and one `ChangelogConsumer` (or its worker processes:
`reader_processes`) follow exactly the changelog partitions of
the store partitions this instance hosts, actives and standbys alike. Each loop:

1. **sync**: compare the hosted partitions (`FollowedPartitions`, re-read every loop, so an
   assignment change needs no listener) with those followed: stop reading the ones that
   went (or were closed and reopened), start tracking new ones, note role changes;
2. **offsets**: take the watermarks that arrived and ask, without waiting for the answer
   (`iqstate_kafka.watermarks`), for those of partitions that must be assigned to the
   reader, of actives that need a target, and of all of them every `refresh_interval`.
   A partition is assigned at the offset committed inside its store (KIP-1035; none: from
   the earliest); a committed offset outside the watermarks means the changelog no longer
   holds what the replica would resume from, so the replica is rebuilt
   (`FollowedPartition.rebuild`, which sets `LagInfo.rebuilt`) and read from the earliest;
   so is a replica whose changelog topic has another id than the one it was read from (the
   topic was deleted and created again, as two answers agree: `iqstate_kafka.topic_ids`);
3. **read** up to `max_records` records and apply them: the units of each partition are
   folded into one atomic store commit (`iqstate_kafka.applying`), under the partition's
   lock (`apply_changelog` ignores a partition closed meanwhile). `OffsetOutOfRange` while
   reading rebuilds the replica too;
4. **settle** the replicas that just finished a restore (`SETTLE_AFTER`), so that their
   engine moves its write buffers to its read-optimised form (RocksDB: flush the
   memtables), and **announce** the actives that reached their target to the
   `on_caught_up` listeners.

The follower implements `ReplicaProgress` for the assignment provider, and counts the data
records it applied, the records it skipped because they do not decode, and the records it
refused (a marker skipping ahead of the fence, data of a batch without a marker:
`iqstate_kafka.applying`).

Faults never stop it and never make it spin: a broker that does not answer makes it wait
(backing off) while queries keep being answered from the local replicas, and the reader's
consumer reconnects by itself; a partition whose store fails to apply a unit is set aside
and retried later, from its committed offset; any other failure replaces the reader and
starts over from the committed offsets, after a pause that doubles up to a bound. So does a
reader that reads nothing at all for `STALL_AFTER` seconds while the broker says a partition
it reads holds more (`iqstate_kafka.stall_watch`: a librdkafka consumer can stop fetching
after a broker restart).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from iqstate.position import TopicPartition
from iqstate.repeated_lines import RepeatedLines
from iqstate.runtime.batch import StorePartition
from iqstate.runtime.changelog_topic import TopicIds
from iqstate.runtime.cluster import ChangelogCounts
from iqstate.runtime.following import FollowedPartition, FollowedPartitions
from iqstate_kafka.applying import BEHIND, Refusal, StoreCommit, fold
from iqstate_kafka.expiry import ExpiryTombstones
from iqstate_kafka.progress import CaughtUpListener
from iqstate_kafka.reader import (
    ChangelogConsumer,
    ChangelogReading,
    ChangelogUnit,
    OffsetOutOfRange,
    Watermarks,
)
from iqstate_kafka.reader_processes import ProcessChangelogConsumer
from iqstate_kafka.replicas import ReplicaOffsets
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.stall_watch import StallWatch
from iqstate_kafka.topic_ids import TopicIdCheck, Verdict
from iqstate_kafka.watermarks import WatermarkAsker

logger = logging.getLogger("iqstate_kafka.follower")
refusals_logger = logging.getLogger("iqstate_kafka.follower.refusals")
"""Records a follower refuses or skips, one line per reason per commit. A partition whose
writer keeps skipping batch ids has every later batch refused: each partition's line of a
reason passes once per 30 s, saying how many it held back (all are counted in metrics)."""
refusals_logger.addFilter(RepeatedLines(lambda line: line.split(":", 1)[0]))

CONSUMER_DEFAULTS: Mapping[str, Any] = {
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "fetch.queue.backoff.ms": 10,
}
"""Settings of the follower's consumer that `client_config` may override. A replica catching
up fetches up to 16 MB per partition per request instead of librdkafka's 1 MB: measured with
bench/kafka_restore.py (500,000 records, 4 partitions), restore went from 109k to 202k
records/s. librdkafka's `queued.max.messages.kbytes` still bounds what is held in memory.

`fetch.queue.backoff.ms`: once a partition's prefetched queue passes librdkafka's thresholds
(`queued.min.messages`, 100,000 records), its next fetch waits this long, 1 s by default. A
16 MB fetch of small records passes that threshold at once, so a restore read for a moment
and then waited a second per partition: measured on the real broker (1,000,080 records over
4 partitions, a bare `consume` loop), 224k records/s with librdkafka's default, 1.3-1.8M
with 0-10 ms, at the same CPU a record; the follower restoring into RocksDB went from 210k
to 259-277k records/s. 10 ms keeps the fetcher from spinning on a full queue."""

STALL_AFTER = 30.0
"""Seconds a partition may stay behind the end offset the broker last gave (that answer a
success) while the reader reads nothing of any partition, before the reader counts as stuck
and is replaced (`iqstate_kafka.stall_watch`). A healthy reader moves within a fetch, and
after an outage it reconnects within seconds. A false alarm costs a new reader from the
committed offsets (what it had read but not applied is read again)."""
STALL_PATIENCE_MOST = 600.0
"""The longest wait a partition that stalled again and again is given (it doubles)."""

SETTLE_AFTER = 50_000
"""Records a replica must have applied in its restore (from when it was tracked or rebuilt
until it first reached the end of its changelog) for its engine to be settled then
(`FollowedPartition.settle`): once per restore, never for what it applies at the tail."""


class _Backoff:
    """Pauses that double from `first` up to `most`, reset by a success."""

    def __init__(self, first: float, most: float) -> None:
        self._first, self._most = first, most
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self._most, delay * 2)
        return delay

    def reset(self) -> None:
        self._next = self._first


@dataclass(slots=True)
class _Followed:
    """A hosted partition the follower tracks (touched by the follower thread only)."""

    hosted: FollowedPartition
    changelog: TopicPartition
    record_problem: Callable[[bytes, bytes | None], str | None] | None
    assigned: bool = False
    refresh_at: float = 0.0
    retry_at: float = 0.0
    failures: _Backoff | None = None
    restored: int | None = 0
    """Records applied in the replica's restore; None once it first reached the end of its
    changelog (0 again when it is rebuilt)."""
    unanswered: bool = False
    """The broker's latest answer for the partition's offsets was a failure."""
    doubted_end: bool = False
    """The last answer put the log's end before the committed offset: the next one, asked
    while the replica commits nothing, decides whether the log got shorter."""
    topic_ids: TopicIdCheck = dataclasses.field(default_factory=TopicIdCheck)
    """Whether its changelog topic is the one its data came from (KIP-516)."""
    pending_rebuild: TopicIds | None = None
    """The topic ids of a rebuild that failed (a full disk), tried again after its backoff
    before the replica reads on."""


class Follower:
    """Applies the changelogs of the hosted store partitions on one background thread.

    `max_records`: records read (and applied, per partition in one store commit) per loop;
    a commit also holds every record of a batch that ends in it, however many.
    `poll_timeout`: how long a loop waits for records before it looks at the hosted
    partitions again. `refresh_interval`: how often end offsets are asked of the broker.
    `max_backoff`: the longest pause after a failure. `reader_processes`: read in that many
    worker processes (`iqstate_kafka.reader_processes`; 0: in this one), so that restoring
    several partitions uses several cores.
    """

    def __init__(
        self,
        cluster: ClusterSettings,
        *,
        max_records: int = 50_000,
        poll_timeout: float = 0.1,
        refresh_interval: float = 1.0,
        max_backoff: float = 10.0,
        reader_processes: int = 0,
    ) -> None:
        if reader_processes < 0:
            raise ValueError(f"reader_processes must be >= 0, got {reader_processes!r}")
        for name, seconds in (
            ("poll_timeout", poll_timeout),
            ("refresh_interval", refresh_interval),
            ("max_backoff", max_backoff),
        ):
            if not seconds > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {seconds!r}")
        self._cluster = cluster
        self._max_records = max_records
        self._poll_timeout = poll_timeout
        self._refresh_interval = refresh_interval
        self._max_backoff = max_backoff
        self._reader_processes = reader_processes
        self._followed: dict[StorePartition, _Followed] = {}
        self._by_changelog: dict[TopicPartition, StorePartition] = {}
        self._watermarks: WatermarkAsker | None = None
        self._broker_retry_at = 0.0
        self._broker_backoff = _Backoff(poll_timeout, max_backoff)
        self._listeners: list[CaughtUpListener] = []
        self._rebuilt_listeners: list[CaughtUpListener] = []
        self._stalls: StallWatch[StorePartition] = StallWatch(STALL_AFTER, STALL_PATIENCE_MOST)
        self._expiry = ExpiryTombstones(cluster)
        # Shared with other threads, under _lock:
        self._lock = threading.Lock()
        self._offsets: dict[StorePartition, ReplicaOffsets] = {}
        self._applied: dict[StorePartition, int] = {}
        self._skipped: dict[StorePartition, int] = {}
        self._refused: dict[StorePartition, dict[str, int]] = {}
        self._skipped_before: dict[StorePartition, int] = {}
        """Skips the current reader does not count (earlier readers', window keys)."""
        # The thread's lifecycle, under _lifecycle:
        self._lifecycle = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False
        self._in_listener = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, partitions: FollowedPartitions) -> None:
        """Start following the changelogs of `partitions`, as they change, until `stop`."""
        with self._lifecycle:
            if self._thread is not None:
                raise RuntimeError("the follower was started already")
            # A client setting librdkafka refuses fails here, not in the thread.
            self._watermarks = WatermarkAsker(self._cluster)
            try:
                reader = self._new_reader()
            except BaseException:
                self._watermarks = None  # its admin client's threads and connections go too
                raise
            self._thread = threading.Thread(
                target=self._run, args=(partitions, reader), name="iqstate-follower", daemon=True
            )
            self._running = True
            self._thread.start()

    def stop(self) -> None:
        """Stop following (idempotent). Returns once the thread has ended, or is inside a
        caught-up listener (which may be waiting for the application that stops us): it
        then ends as soon as the listener returns, applying nothing more."""
        self._stopping.set()
        with self._lifecycle:
            if self._thread is None or self._thread is threading.current_thread():
                return
            self._lifecycle.wait_for(lambda: not self._running or self._in_listener)

    # -- ReplicaProgress -------------------------------------------------------------------

    def lags(self) -> Mapping[StorePartition, int]:
        """Lags of the replicas whose end offsets the broker has given (the others' are
        unknown)."""
        with self._lock:
            lags = {key: offsets.lag for key, offsets in self._offsets.items()}
        return {key: lag for key, lag in lags.items() if lag is not None}

    def end_offset(self, store: str, partition: int) -> int | None:
        """The end offset the broker gave; `None` until it has (see `lags`)."""
        with self._lock:
            offsets = self._offsets.get((store, partition))
            return None if offsets is None or not offsets.end_known else offsets.end

    def caught_up(self, store: str, partition: int) -> bool:
        with self._lock:
            offsets = self._offsets.get((store, partition))
            return offsets is not None and offsets.caught_up

    def cut_off(self, store: str, partition: int) -> None:
        with self._lock:
            offsets = self._offsets.get((store, partition))
            if offsets is not None:
                offsets.set_active(False)

    def on_caught_up(self, listener: CaughtUpListener) -> None:
        self._listeners.append(listener)

    def on_rebuilt(self, listener: CaughtUpListener) -> None:
        self._rebuilt_listeners.append(listener)

    # -- counters --------------------------------------------------------------------------

    @property
    def applied_records(self) -> int:
        """Data records applied to the hosted partitions since `start` (markers and records
        of batches a partition had applied already not counted)."""
        with self._lock:
            return sum(self._applied.values())

    def refused_records(self) -> dict[StorePartition, dict[str, int]]:
        """Records refused or skipped per store partition since `start`, by reason (`gap`: a
        batch marker that skips ahead of the fence, and its batch's records; `stray`: data
        records of a batch that got no marker; `behind`: a batch older than the fence);
        each was logged."""
        with self._lock:
            return {key: dict(counts) for key, counts in self._refused.items()}

    def skipped_records(self) -> dict[StorePartition, int]:
        """Records skipped per store partition since `start` because they do not decode
        (each was logged naming topic, partition and offset)."""
        with self._lock:
            return {key: count for key, count in self._skipped.items() if count}

    def counts(self) -> ChangelogCounts:
        """Records applied and skipped (undecodable, or refused by reason) per partition."""
        with self._lock:
            skipped: dict[StorePartition, dict[str, int]] = {
                key: dict(reasons) for key, reasons in self._refused.items()
            }
            for key, count in self._skipped.items():
                if count:
                    skipped.setdefault(key, {})["undecodable"] = count
            return ChangelogCounts(dict(self._applied), skipped)

    # -- the thread --------------------------------------------------------------------------

    def _new_reader(self) -> ChangelogReading:
        settings = {**CONSUMER_DEFAULTS, **self._cluster.client_config}
        consuming = dataclasses.replace(self._cluster, client_config=settings)
        if self._reader_processes:
            return ProcessChangelogConsumer(
                consuming, processes=self._reader_processes, max_records=self._max_records
            )
        return ChangelogConsumer(
            consuming,
            max_records=self._max_records,
            max_held_records=self._cluster.max_held_records,
        )

    def _run(self, partitions: FollowedPartitions, reader: ChangelogReading | None) -> None:
        failures = _Backoff(self._poll_timeout, self._max_backoff)
        try:
            while not self._stopping.is_set():
                try:
                    if reader is None:
                        reader = self._new_reader()
                    stalled = self._loop(partitions, reader)
                    failures.reset()
                    if stalled is not None:
                        self._stalls.replaced(stalled)
                        self._discard(reader, closing_aside=True)
                        reader = None
                except Exception:
                    delay = failures.next()
                    logger.exception(
                        "the changelog follower failed; it starts over from the offsets "
                        "committed in the stores in %.1f s",
                        delay,
                    )
                    self._stalls.replaced()
                    self._discard(reader)
                    reader = None
                    self._stopping.wait(delay)
        finally:
            self._discard(reader)
            self._expiry.close()
            self._watermarks = None  # an application kept after its close holds no client
            with self._lifecycle:
                self._running = False
                self._lifecycle.notify_all()

    def _discard(self, reader: ChangelogReading | None, *, closing_aside: bool = False) -> None:
        """Close `reader` (what it had assigned is assigned again to its successor);
        `closing_aside`: on a thread of its own, for a reader stuck in librdkafka, whose
        close may hang as well."""
        for key, followed in self._followed.items():
            if followed.assigned and reader is not None:
                self._skipped_before[key] = self._skipped_before.get(key, 0) + reader.skipped(
                    followed.changelog
                )
            followed.assigned = False
        if reader is not None:
            if closing_aside:
                threading.Thread(
                    target=_close, args=(reader,), name="iqstate-follower-close", daemon=True
                ).start()
            else:
                _close(reader)

    def _loop(
        self, partitions: FollowedPartitions, reader: ChangelogReading
    ) -> StorePartition | None:
        """One round; the partition the reader stalled in, if it did."""
        self._sync(partitions, reader)
        self._ask_offsets(reader)
        events = reader.read(self._poll_timeout)
        self._apply(reader, events)
        self._count_skipped(reader)
        positions = self._note_positions(reader)
        self._settle_restored()
        self._announce()
        return self._stalled(positions)

    # -- 1. the hosted partitions ------------------------------------------------------------

    def _sync(self, partitions: FollowedPartitions, reader: ChangelogReading) -> None:
        hosted: dict[StorePartition, FollowedPartition] = {}
        for store in partitions.store_names():
            for number, replica in partitions.of_store(store).items():
                hosted[(store, number)] = replica
        for key, followed in list(self._followed.items()):
            if hosted.get(key) is not followed.hosted or followed.hosted.closed:
                self._drop(reader, key, followed)
        for key, replica in hosted.items():
            if key not in self._followed:
                if replica.closed or replica.changelog_partition is None:
                    continue
                self._track(key, replica)
            with self._lock:
                # A cut-off active is not followed as one: active again, it waits for
                # a new target (the others may have written on meanwhile).
                role = replica.role
                self._offsets[key].set_active(role.is_active and not role.cut_off)

    def _track(self, key: StorePartition, replica: FollowedPartition) -> None:
        changelog = replica.changelog_partition
        assert changelog is not None
        followed = _Followed(replica, changelog, replica.record_problem)
        self._followed[key] = followed
        self._by_changelog[changelog] = key
        with self._lock:
            self._offsets[key] = ReplicaOffsets()

    def _drop(self, reader: ChangelogReading, key: StorePartition, followed: _Followed) -> None:
        if followed.assigned:
            self._unassign(reader, key, followed)
        del self._followed[key]
        del self._by_changelog[followed.changelog]
        with self._lock:
            del self._offsets[key]

    def _unassign(self, reader: ChangelogReading, key: StorePartition, followed: _Followed) -> None:
        self._skipped_before[key] = self._skipped_before.get(key, 0) + reader.skipped(
            followed.changelog
        )
        reader.unassign(followed.changelog)
        followed.assigned = False

    # -- 2. offsets from the broker ------------------------------------------------------------

    def _ask_offsets(self, reader: ChangelogReading) -> None:
        """Take the watermarks that arrived, then ask for those now due."""
        assert self._watermarks is not None
        answers = self._watermarks.answers()
        failed: dict[str, list[TopicPartition]] = {}
        for changelog, answer in answers.items():
            key = self._by_changelog.get(changelog)
            if key is None:
                continue  # no longer hosted
            if isinstance(answer, str):
                failed.setdefault(answer, []).append(changelog)
                self._followed[key].unanswered = True
                continue
            followed = self._followed[key]
            followed.unanswered = False
            followed.refresh_at = time.monotonic() + self._refresh_interval
            if not self._may_read(reader, key, followed):
                continue  # its offsets may be another topic's: neither lag nor target
            if not followed.assigned and time.monotonic() >= followed.retry_at:
                self._assign(reader, key, followed, answer)
            with self._lock:
                self._offsets[key].saw(answer)
        now = time.monotonic()
        if failed:
            delay = self._broker_backoff.next()
            logger.warning(
                "Kafka at %s gave no offsets for %s; asking again in %.1f s",
                self._cluster.bootstrap_servers,
                "; ".join(
                    f"{', '.join(map(str, changelogs))} ({reason})"
                    for reason, changelogs in failed.items()
                ),
                delay,
            )
            self._broker_retry_at = now + delay
        elif answers:
            self._broker_backoff.reset()
        if now < self._broker_retry_at:
            return
        due = []
        for key, followed in self._followed.items():
            with self._lock:
                needs_target = self._offsets[key].active and self._offsets[key].target is None
            if now >= followed.retry_at and (
                not followed.assigned or needs_target or now >= followed.refresh_at
            ):
                due.append(followed.changelog)
        self._watermarks.ask(due)

    def _may_read(self, reader: ChangelogReading, key: StorePartition, followed: _Followed) -> bool:
        """Judge the id the answer gave the changelog topic (`iqstate_kafka.topic_ids`): keep
        it for a replica that kept none, stop reading while answers disagree, rebuild the
        replica when they agree that the topic was recreated. Whether it may read now."""
        assert self._watermarks is not None
        if followed.pending_rebuild is not None:
            return True  # the rebuild knows its ids; `_assign` tries it again
        hosted = followed.hosted
        ids = hosted.changelog_topic_ids
        answered = self._watermarks.topic_id(followed.changelog.topic)
        doubted = followed.topic_ids.doubting
        verdict = followed.topic_ids.judge(ids, answered)
        if verdict is Verdict.READ:
            return True
        if verdict is Verdict.WAIT:
            if followed.topic_ids.doubting and not doubted:
                logger.warning(
                    "store %r partition %d was read from changelog topic %s with id %s, but "
                    "the broker names id %s: reading nothing until a second answer agrees "
                    "(a rebuild from the new topic) or names the old id again",
                    *key,
                    followed.changelog.topic,
                    ids.kept,
                    answered,
                )
            if followed.assigned:
                self._unassign(reader, key, followed)
            return False
        assert answered is not None  # adopted or rebuilt from: an id the cluster gave
        if verdict is Verdict.ADOPT and time.monotonic() < followed.retry_at:
            return False  # backing off from a failure: an answer after it tries again
        if verdict is Verdict.REBUILD:
            logger.warning(
                "store %r partition %d was read from changelog topic %s with id %s, which now "
                "has id %s (it was deleted and created again): rebuilding it from the new topic",
                *key,
                followed.changelog.topic,
                ids.kept,
                answered,
            )
            if followed.assigned:
                self._unassign(reader, key, followed)
            return self._start_over(reader, key, followed, ids.moved_to(answered))
        return self._keep_topic_ids(reader, key, followed, ids.moved_to(answered))

    def _keep_topic_ids(
        self, reader: ChangelogReading, key: StorePartition, followed: _Followed, ids: TopicIds
    ) -> bool:
        """Record `ids` with the replica; a replica whose ids cannot be written (a full or
        read-only disk) reads nothing, and is retried later, alone."""
        try:
            followed.hosted.keep_changelog_topic_ids(ids)
        except OSError:
            logger.exception(
                "store %r partition %d could not record the id of %s; trying again in %.1f s",
                *key,
                followed.changelog.topic,
                self._hold_back(reader, key, followed),
            )
            return False
        return True

    def _hold_back(
        self, reader: ChangelogReading, key: StorePartition, followed: _Followed
    ) -> float:
        """Stop reading a partition that failed, until a pause that doubles while it keeps
        failing (the others read on); the pause, in seconds."""
        backoff = followed.failures or _Backoff(self._poll_timeout, self._max_backoff)
        followed.failures = backoff
        delay = backoff.next()
        if followed.assigned:
            self._unassign(reader, key, followed)
        followed.retry_at = time.monotonic() + delay
        return delay

    def _assign(
        self,
        reader: ChangelogReading,
        key: StorePartition,
        followed: _Followed,
        watermarks: Watermarks,
    ) -> None:
        hosted = followed.hosted
        pending = followed.pending_rebuild
        if pending is not None and not self._start_over(reader, key, followed, pending):
            return
        committed = hosted.resume_offset()
        if hosted.closed:
            return  # revoked meanwhile: the next sync drops it
        if committed is not None and committed > watermarks.end and not followed.doubted_end:
            # An answer asked before the replica's last commits (and taken after its reader
            # was replaced) can put the end before them: ask again, unassigned, before
            # believing that the log got shorter. (The earliest offset only grows: an old
            # answer can never make a committed offset look removed.)
            followed.doubted_end = True
            return
        followed.doubted_end = False
        if committed is not None and not watermarks.contains(committed):
            logger.warning(
                "store %r partition %d committed changelog offset %d, outside %s's offsets "
                "%d..%d (%s): rebuilding it from the start of the changelog (its files are "
                "set aside)",
                *key,
                committed,
                followed.changelog,
                *watermarks,
                "the log is shorter than what the replica applied: the broker lost records "
                "it had acknowledged, as after an unclean leader election, or the topic was "
                "recreated where its id could not be compared"
                if committed > watermarks.end
                else "retention, or a deletion of records, removed records it had not read",
            )
            if not self._start_over(reader, key, followed, self._ids_for_rebuild(followed)):
                return
            committed = None
        # After a commit, the record before the committed offset says whether the replica
        # stopped at a marker or inside a stretch it was given in parts.
        reader.assign(
            followed.changelog,
            committed if committed is not None else watermarks.earliest,
            look_back=committed is not None and committed > watermarks.earliest,
        )
        followed.assigned = True
        with self._lock:
            self._offsets[key].committed_to(committed)

    # -- 3. applying -----------------------------------------------------------------------------

    def _apply(
        self, reader: ChangelogReading, events: list[ChangelogUnit | OffsetOutOfRange]
    ) -> None:
        units: dict[TopicPartition, list[ChangelogUnit]] = {}
        lost: list[OffsetOutOfRange] = []
        for event in events:
            if isinstance(event, ChangelogUnit):
                units.setdefault(event.partition, []).append(event)
            else:
                lost.append(event)
        for changelog, found in units.items():
            key = self._by_changelog.get(changelog)
            if key is not None and self._followed[key].assigned:
                self._commit(reader, key, self._followed[key], found)
        for event in lost:
            key = self._by_changelog.get(event.partition)
            if key is not None:
                self._rebuild_after(reader, key, self._followed[key], event)

    def _commit(
        self,
        reader: ChangelogReading,
        key: StorePartition,
        followed: _Followed,
        units: list[ChangelogUnit],
    ) -> None:
        hosted = followed.hosted
        commit = fold(units, hosted.fence)
        if followed.record_problem is not None:
            commit = self._decodable(key, followed, followed.record_problem, units, commit)
        try:
            expired = hosted.apply_changelog(
                commit.entries,
                commit.batch_id,
                commit.position,
                commit.next_offset,
                [(batch.end, batch.position, batch.next_offset) for batch in commit.batches],
            )
        except Exception:
            logger.exception(
                "store %r partition %d could not apply %s offsets up to %d; reading it again "
                "from its committed offset in %.1f s",
                *key,
                followed.changelog,
                commit.next_offset,
                self._hold_back(reader, key, followed),
            )
            return
        followed.failures = None
        if expired:
            self._expiry.send(followed.changelog, expired)
        if commit.refused:
            self._refuse(key, followed, commit.refused)
        with self._lock:
            self._offsets[key].committed_to(commit.next_offset)
            self._applied[key] = self._applied.get(key, 0) + len(commit.entries)
        if followed.restored is not None:
            followed.restored += len(commit.entries)

    def _refuse(
        self, key: StorePartition, followed: _Followed, refused: tuple[Refusal, ...]
    ) -> None:
        """Log and count records the fold refused (`iqstate_kafka.applying`): per reason,
        one line naming the first (a batch's marker says why and what to do) and how many.
        A batch older than the fence is skipped (a warning), the others refused (an error)."""
        by_reason: dict[str, list[Refusal]] = {}
        for refusal in refused:
            by_reason.setdefault(refusal.reason, []).append(refusal)
        for reason, some in by_reason.items():
            offsets = [refusal.offset for refusal in some]
            # Up to the first colon, the line's shape for the rate limit: the changelog
            # partition (its topic names the application and store) and the reason.
            refusals_logger.log(
                logging.WARNING if reason == BEHIND else logging.ERROR,
                "%s, store %r partition %d, %s (%s): %s; %d changelog records and markers "
                "at offsets %d-%d not applied",
                followed.changelog,
                *key,
                "skipped" if reason == BEHIND else "refused",
                reason,
                some[0].detail,
                len(some),
                min(offsets),
                max(offsets),
            )
        with self._lock:
            counts = self._refused.setdefault(key, {})
            for refusal in refused:
                counts[refusal.reason] = counts.get(refusal.reason, 0) + 1

    def _decodable(
        self,
        key: StorePartition,
        followed: _Followed,
        problem: Callable[[bytes, bytes | None], str | None],
        units: list[ChangelogUnit],
        commit: StoreCommit,
    ) -> StoreCommit:
        """The commit of a store whose records can fail to decode (a time or flag in the key
        or value) or carry a key its engine cannot keep, without those entries, each logged
        and counted: applied, they would fail the commit at every try."""
        bad = [
            (record, why)
            for unit in units
            for record in unit.records
            if (why := problem(record.key, record.value)) is not None
        ]
        if not bad:
            return commit
        for record, why in bad:
            logger.error(
                "changelog record at %s partition %d offset %d cannot be applied: %s; skipped",
                followed.changelog.topic,
                followed.changelog.partition,
                record.offset,
                why,
            )
        self._skipped_before[key] = self._skipped_before.get(key, 0) + len(bad)
        return commit.keeping(lambda key, value: problem(key, value) is None)

    def _rebuild_after(
        self,
        reader: ChangelogReading,
        key: StorePartition,
        followed: _Followed,
        event: OffsetOutOfRange,
    ) -> None:
        logger.warning(
            "store %r partition %d: offset %d is no longer in %s (the topic was recreated, or "
            "retention removed records it had not read): rebuilding it from the start of the "
            "changelog",
            *key,
            event.offset,
            followed.changelog,
        )
        followed.assigned = False  # the reader dropped it; the next loop assigns it again
        self._start_over(reader, key, followed, self._ids_for_rebuild(followed))

    def _ids_for_rebuild(self, followed: _Followed) -> TopicIds:
        """The topic ids a replica rebuilt for its offsets keeps: when the latest answer
        named an id it never had (Kafka never gives an id twice: the topic was recreated),
        that one, the kept one replaced; else none kept (the next answer's is adopted: the
        offsets may have moved because the topic was recreated since that answer, and
        keeping the old id would rebuild the replica a second time once answers name the
        new one). Replaced ids are kept either way."""
        ids = followed.hosted.changelog_topic_ids
        answered = (
            None
            if self._watermarks is None
            else self._watermarks.topic_id(followed.changelog.topic)
        )
        if answered is None or answered == ids.kept or answered in ids.replaced:
            return TopicIds(replaced=ids.replaced)
        return ids.moved_to(answered)

    def _start_over(
        self, reader: ChangelogReading, key: StorePartition, followed: _Followed, ids: TopicIds
    ) -> bool:
        """Rebuild the replica from an empty store that keeps the topic ids `ids`: its
        offsets and its restore start again, and an active restores until it catches up
        again (its role says so at once; the listeners re-announce it). Whether it was
        rebuilt: one that failed (a full disk) reads nothing and is tried again, alone,
        after its backoff."""
        with self._lock:  # first: an assignment computed meanwhile sees it not caught up
            self._offsets[key].rebuilt()
        try:
            followed.hosted.rebuild(ids)
        except Exception:
            followed.pending_rebuild = ids
            logger.exception(
                "store %r partition %d could not be rebuilt (its old files are kept, set "
                "aside or in place); trying again in %.1f s",
                *key,
                self._hold_back(reader, key, followed),
            )
            return False
        followed.pending_rebuild = None
        followed.restored = 0
        for listener in list(self._rebuilt_listeners):
            try:
                listener(key)
            except Exception:
                logger.exception("a rebuilt listener failed for store %r partition %d", *key)
        return True

    def _count_skipped(self, reader: ChangelogReading) -> None:
        counts = dict(self._skipped_before)
        for key, followed in self._followed.items():
            if followed.assigned:
                counts[key] = counts.get(key, 0) + reader.skipped(followed.changelog)
        with self._lock:
            self._skipped = counts

    def _note_positions(self, reader: ChangelogReading) -> dict[StorePartition, int]:
        """Record where the reader is; its next offset in each partition it reads."""
        positions = {
            key: reader.position(followed.changelog) if followed.assigned else None
            for key, followed in self._followed.items()
        }
        settled = {
            key: reader.settled(followed.changelog) if followed.assigned else None
            for key, followed in self._followed.items()
        }
        for key, offset in settled.items():
            self._followed[key].hosted.settled_at(offset)
        with self._lock:
            for key, position in positions.items():
                self._offsets[key].read_to(position, settled[key])
        return {key: position for key, position in positions.items() if position is not None}

    def _stalled(self, positions: Mapping[StorePartition, int]) -> StorePartition | None:
        """The partition the reader stalled in, if it did (logged: the caller replaces the
        reader); `positions` as `_note_positions` gives them."""
        with self._lock:
            behind = [
                key
                for key in positions
                if not self._followed[key].unanswered
                and self._offsets[key].end_known
                and not self._offsets[key].at_end
            ]
        found = self._stalls.stalled(time.monotonic(), positions, behind)
        if found is None:
            return None
        key, waited = found
        with self._lock:
            end = self._offsets[key].end
        logger.warning(
            "the changelog reader read nothing for %.0f s though the broker says %s (store %r "
            "partition %d) holds offsets up to %s and it is at %s: it is stuck; replacing it, "
            "from the offsets committed in the stores",
            waited,
            self._followed[key].changelog,
            *key,
            end,
            positions[key],
        )
        return key

    # -- 4. caught up ----------------------------------------------------------------------------

    def _settle_restored(self) -> None:
        """Settle each replica that reached the end of its changelog for the first time
        since it was tracked or rebuilt, when its restore applied at least `SETTLE_AFTER`
        records. A failure to settle only costs query speed: logged, not retried."""
        for key, followed in self._followed.items():
            if followed.restored is None:
                continue
            with self._lock:
                at_end = self._offsets[key].at_end
            if not at_end:
                continue
            if followed.restored >= SETTLE_AFTER:
                try:
                    followed.hosted.settle()
                except Exception:
                    logger.exception("settling store %r partition %d after a restore failed", *key)
            followed.restored = None

    def _announce(self) -> None:
        with self._lock:
            reached = [key for key, offsets in self._offsets.items() if offsets.reaches_target()]
        for key in reached:
            for listener in list(self._listeners):
                if self._stopping.is_set():
                    return
                with self._lifecycle:
                    self._in_listener = True
                    self._lifecycle.notify_all()
                try:
                    listener(key)
                except Exception:
                    logger.exception("a caught-up listener failed for store %r partition %d", *key)
                finally:
                    with self._lifecycle:
                        self._in_listener = False


def _close(reader: ChangelogReading) -> None:
    try:
        reader.close()
    except Exception:
        logger.exception("closing the changelog reader failed")
