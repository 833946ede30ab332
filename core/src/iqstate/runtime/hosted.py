"""One store partition hosted by this instance: its chain, role, lock, offsets and fence."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from iqstate.changelog import ChangelogReader, ChangelogWriter, outlives_the_process
from iqstate.context import StateStoreContext
from iqstate.errors import ClosedStoreError, CorruptStateError, LostStateError, PluginError
from iqstate.files import takes_writes
from iqstate.kept_puts import only_kept
from iqstate.layers.chain import StoreChain
from iqstate.persistent import UncleanShutdownError
from iqstate.position import Position, TopicPartition
from iqstate.results import describe_store
from iqstate.runtime.assignment import ACTIVE_RESTORING, PartitionRole
from iqstate.runtime.changelog_topic import (
    TOPIC_IDS_FILE,
    TopicIds,
    keep_topic_ids,
    read_topic_ids,
)
from iqstate.runtime.committed import CommittedPartitions
from iqstate.runtime.durations import Durations
from iqstate.runtime.offsets import OffsetKeeper, fence_partition
from iqstate.runtime.spec import StoreSpec
from iqstate.subscriptions.feed import (
    CHANGELOG_LINEAGE,
    ChangeBufferSettings,
    ChangeFeed,
    changelog_lineage,
    new_lineage,
)

T = TypeVar("T")
_log = logging.getLogger(__name__)
RESTORE_CHUNK = 10_000
"""Changelog records applied per restore commit."""


class HostedPartition:
    """A store partition as the runtime holds it.

    `lock` serialises a batch's commit with queries and IQv1 reads of this partition, so a
    reader sees a partition either before or after a batch, never in between, and the
    position it reads belongs to the data it reads.

    Opening decides whether the local files can be trusted (SPEC section 4): a store with
    atomic commits is used as it is after a crash; one that cannot promise that, a corrupt
    one, or one whose committed state vanished is rebuilt from a readable changelog (its
    files are moved aside, never deleted) or refused with `LostStateError`.
    """

    def __init__(
        self,
        spec: StoreSpec,
        partition: int,
        role: PartitionRole,
        context: StateStoreContext,
        committed: CommittedPartitions | None = None,
        followed: bool = False,
        commit_durations: Durations | None = None,
    ) -> None:
        """`followed`: the partition follows a changelog kept elsewhere (distributed mode),
        which can rebuild it; a follower applies the changelog with `apply_changelog`.
        `commit_durations`: where the time of each batch's store commit is recorded."""
        self.spec = spec
        self.partition = partition
        self.role = role
        self.context = context
        self.lock = threading.Lock()
        self.chain: StoreChain[Any] = spec.build()
        self.fence_partition = fence_partition(partition)
        self.changelog_partition: TopicPartition | None = context.changelog_partition
        self.fence: int | None = None
        self.closed = True
        self.rebuilt = False
        """True when the local files could not be trusted and the partition was rebuilt."""
        self._settled: int | None = None
        """Where the follower settled past records it does not apply (`settled_at`)."""
        self._untrusted: Path | None = None
        """Where this partition's untrusted files were moved before a rebuild."""
        self._reopen_before_applying = False
        """A commit of changelog records failed: the store is opened again first."""
        self._expired_owed: list[bytes] = []
        """What committed units expired whose tombstones were not handed to the follower
        (the record after their commit failed): handed over with the next unit's."""
        self._offsets: OffsetKeeper | None = None
        self._topic_ids = TopicIds()
        self._committed = committed
        reader = context.changelog_writer
        self._changelog: ChangelogReader | None = (
            reader if isinstance(reader, ChangelogReader) and spec.logging else None
        )
        self._rebuildable = followed or self._changelog is not None
        self._commit_durations = commit_durations
        self._followed = followed
        self.changes = self._dormant_feed()
        """The committed batches, for subscriptions (dormant until the first one)."""

    def open(self) -> None:
        try:
            self.chain.init(self.context)
        except (UncleanShutdownError, CorruptStateError) as untrusted:
            if not self._rebuildable:
                if isinstance(untrusted, UncleanShutdownError):
                    raise LostStateError(
                        f"{untrusted}. Store {self.spec.name!r} has no changelog to rebuild "
                        f"it from: start with processing_guarantee='at_least_once' to use "
                        f"the files as they are, or move {self.context.directory} away to "
                        "start the partition empty"
                    ) from untrusted
                raise
            self._set_aside(untrusted)
            self.chain = self.spec.build()
            self.chain.init(self.context)
        self._check_persistence_claim()
        self._read_offsets()
        self._topic_ids = read_topic_ids(self.context.directory)
        self.closed = False
        if self._lost_its_state():
            if not self._rebuildable:
                self.close()
                raise LostStateError(self._lost_message())
            _log.warning(
                "store %r partition %d lost its committed state; rebuilding it from its changelog",
                self.spec.name,
                self.partition,
            )
            self.rebuilt = True
        if self._changelog is not None:
            self._restore(self._changelog)

    def _check_persistence_claim(self) -> None:
        """An engine registered as persistent must build stores that keep their data (the
        runtime records which partitions committed data, and refuses to start one that
        lost it); the reverse would keep nothing on disk a restart could find."""
        engine = self.spec.engine
        if self.chain.persistent == engine.persistent:
            return
        self.chain.close()
        plugin = f" of plugin {engine.plugin!r}" if engine.plugin else ""
        owner = f"engine {engine.name!r}{plugin}"
        raise PluginError(
            f"store {self.spec.name!r}: {owner} is registered with persistent="
            f"{engine.persistent}, but its store {describe_store(self.chain.engine)} says "
            f"persistent={self.chain.persistent}; the Engine's persistent flag must match "
            "its stores"
        )

    def _holds_nothing(self) -> bool:
        return (
            self.fence is None
            and self.chain.position.is_empty()
            and self.committed_changelog_offset() is None
        )

    def _recorded_as_committed(self) -> bool:
        """Whether this partition committed data before (the committed-partitions record)."""
        return self._committed is not None and self.partition in self._committed

    def _lost_its_state(self) -> bool:
        return self._recorded_as_committed() and self._holds_nothing()

    def _lost_message(self) -> str:
        assert self._committed is not None
        return (
            f"store {self.spec.name!r} partition {self.partition} committed data before "
            f"(recorded in {self._committed.path}) but {self.context.directory} now holds "
            "none: its files were deleted or replaced. Restore the directory from a backup; "
            "or, to accept the loss and start the partition empty, remove partition "
            f"{self.partition} from {self._committed.path}"
        )

    def _set_aside(self, reason: Exception) -> None:
        """Move untrusted files out of the way (never delete them) before a rebuild."""
        directory = self.context.directory
        assert directory is not None  # only persistent stores are untrusted
        aside = directory.with_name(f"{directory.name}.untrusted-{time.time_ns()}")
        _log.warning("%s; moving it to %s and rebuilding from the changelog", reason, aside)
        directory.rename(aside)
        directory.mkdir()
        self._untrusted = aside
        self.rebuilt = True

    def _restore(self, changelog: ChangelogReader) -> None:
        """Apply the changelog records after the committed offset, in chunks of commits."""
        tp = self.changelog_partition
        assert tp is not None  # a store with a changelog has a changelog partition
        start = self.committed_changelog_offset() or 0
        records = changelog.read(tp, start)
        if (
            self.rebuilt
            and not records
            and self._recorded_as_committed()
            and not outlives_the_process(changelog)
        ):
            self.close()  # its committed data is in no changelog: never serve it empty
            raise LostStateError(
                f"store {self.spec.name!r} partition {self.partition} must be rebuilt "
                f"from its changelog, which holds none of its records (an InMemoryChangelog "
                f"starts empty in every process). {self._lost_message()}"
                + ("" if self._untrusted is None else f" (they were moved to {self._untrusted})")
            )
        chain = self.chain
        for first in range(0, len(records), RESTORE_CHUNK):
            chunk = records[first : first + RESTORE_CHUNK]
            chain.restore([(record.key, record.value) for record in chunk])
            chain.restore_position(chunk[-1].position)
            self.offsets.commit({tp: start + first + len(chunk)})
        if records and self._committed is not None:
            self._committed.add(self.partition)

    def apply_changelog(
        self,
        entries: list[tuple[bytes, bytes | None]],
        batch_id: int | None,
        position: Position | None,
        next_offset: int,
        batches: Sequence[tuple[int, Position, int]] | None = None,
    ) -> list[bytes]:
        """Apply records read from this partition's changelog and commit them, with the
        offset to read next and, at a batch marker, the batch's position and fence, in one
        atomic store commit: a reader sees the partition before or after the unit.

        The follower passes only the records of batches after the fence; a marker of a
        batch at or below the fence moves the offset alone. `batches`, when several batches
        are committed at once: where each ends in `entries`, its marker's position and the
        offset after its marker, so that subscriptions announce each batch on its own (by
        default the entries are one batch when `position` is given, else part of one).

        Returns, on an active replica of a window, session or versioned store, the
        changelog keys of what the records expired (held before, or among the records) and
        the store no longer holds: the follower writes a tombstone for each, since no
        writer knows which windows or versions a store holds, and without one compaction
        keeps every one ever written. Nothing applies those tombstones (every replica
        expires the same ones itself)."""
        tp = self.changelog_partition
        assert tp is not None  # a followed partition has a changelog partition
        with self.lock:
            if self.closed:
                return []
            if self._reopen_before_applying:
                self._reopen_chain()  # raises while the cause lasts: the follower retries
            expired = self.chain.expired_records(entries) if entries and self.role.is_active else []
            if self._expired_owed and self.role.is_active:
                expired = self._expired_owed + expired  # owed until this unit commits
            # where subscriptions' positions start from, read only when some follow here
            before = self.chain.position if self.changes.live else None
            kept = self.chain.kept_records(entries) if before is not None and entries else None
            if entries:
                self.chain.restore(entries)
            fenced = self.skips(batch_id)
            if position is not None and not fenced:
                self.chain.restore_position(position)
            try:
                self._commit_store(None if fenced else batch_id, {tp: next_offset})
            except BaseException:
                # In memory the records are applied as written (nothing to open again:
                # the retry writes them again); files are opened again, as they are.
                self._reopen_before_applying = self.chain.persistent
                raise
            if self.role.is_active:
                self._expired_owed = []  # handed over below, with this unit's
            try:
                self._after_commit()  # may fail (its record): the commit stands
            except BaseException:  # the follower reads on past the unit: owe its tombstones
                if self.role.is_active:  # a standby's debt is still owed as it was
                    self._expired_owed = expired
                raise
            finally:  # the commit is durable: subscriptions get it, or never will
                if before is not None:
                    if batches is None:  # one batch at a marker, else part of a batch
                        batches = (
                            []
                            if position is None or fenced
                            else [(len(entries), position, next_offset)]
                        )
                    self._publish_changelog(entries, kept, before, batches)
            return self.chain.still_expired(expired) if expired else expired

    def _reopen_chain(self) -> None:
        """Open the store again from its files, after a commit that failed (a full disk):
        an engine may refuse every write after a failed one (RocksDB does, until it is
        reopened), and what any layer keeps in memory starts again from the last commit.

        Only once the directory takes writes again (`takes_writes`): until then the store
        stays open as it is, answering from its last commit, and this raises (the follower
        retries later). Files the opening cannot trust (an engine without atomic commits)
        are moved aside and the partition rebuilt (`rebuild`), and this raises too. While
        an opening fails all the same, the partition answers `STORE_EXCEPTION`."""
        directory = self.context.directory
        assert directory is not None  # only persistent chains are opened again
        takes_writes(directory)
        try:
            self.chain.close()
        except Exception as exc:  # its closing mark cannot be written: the files stand
            _log.warning(
                "store %r partition %d: closing it after a failed commit: %s",
                self.spec.name, self.partition, exc,
            )  # fmt: skip
        self.chain = self.spec.build()
        try:
            self.chain.init(self.context)
        except (UncleanShutdownError, CorruptStateError):
            # Rebuilt from the start of the changelog; raised, so that the follower reads
            # it again from there (`resume_offset` is None now).
            self._rebuild(self._topic_ids, "its files were not to be trusted after a failed commit")
            self._reopen_before_applying = False
            raise
        self._read_offsets()
        self._reopen_before_applying = False

    def _publish_changelog(
        self,
        entries: list[tuple[bytes, bytes | None]],
        kept: list[bool] | None,
        before: Position,
        batches: Sequence[tuple[int, Position, int]],
    ) -> None:
        """Announce each applied batch to the subscriptions, at the position the partition
        had after it, with the records the store kept (`kept`: None when it kept all);
        entries after the last batch's end are part of a batch whose marker is still to
        come (a unit cut short), held until then."""
        feed, start, position = self.changes, 0, before
        for end, marker_position, mark in batches:
            position = position.merge(marker_position)
            feed.publish(only_kept(entries, kept, start, end), position, mark)
            start = end
        if start < len(entries):
            feed.hold(only_kept(entries, kept, start))

    def rebuild(self, ids: TopicIds) -> None:
        """Start over from an empty store (the changelog no longer holds what this replica
        would resume from): the files are moved aside, never deleted. A running active
        becomes a restoring one at once: it must not answer from a partly restored store.
        Its subscriptions end: what they announced is gone from the store.

        `ids`: the changelog topic ids the new replica keeps, written beside its new files
        before they are opened, so that no crash leaves them without. When a step fails
        (`OSError`: a full disk) the exception is raised, the partition answers no query
        from the old store, and `rebuild` may be called again: only files that hold
        something are moved aside again."""
        with self.lock:
            if self.closed:
                return
            self._rebuild(ids, "the changelog no longer held what it had applied")

    def _rebuild(self, ids: TopicIds, why: str) -> None:
        """`rebuild`, the caller holding the lock; `why`, for the subscriptions it ends."""
        if self.role.is_running_active:
            self.role = ACTIVE_RESTORING
        self._end_changes(
            f"store {self.spec.name!r} partition {self.partition} is being rebuilt from its "
            f"changelog ({why}); subscribe again for a snapshot of the rebuilt store"
        )
        self.chain.close()
        self._settled = None  # first: a lag read meanwhile never pairs it with nothing
        self._offsets, self.fence = None, None  # nothing committed, until it is again
        directory = self.context.directory
        if directory is None:  # in memory: the changelog holds it all
            self.rebuilt = True
        else:
            if directory.exists() and any(
                path.name != TOPIC_IDS_FILE for path in directory.iterdir()
            ):
                self._set_aside(
                    RuntimeError(
                        f"store {self.spec.name!r} partition {self.partition} must be rebuilt"
                    )
                )
            directory.mkdir(exist_ok=True)  # a failed attempt may have moved it aside
            keep_topic_ids(directory, ids)
        self._topic_ids = ids
        self.chain = self.spec.build()
        self.chain.init(self.context)
        self._read_offsets()

    def _read_offsets(self) -> None:
        """The committed offsets and fence of the chain just opened."""
        self._offsets = OffsetKeeper(self.chain, self.context.directory)
        self._offsets.load()
        self.fence = self._offsets.committed_offset(self.fence_partition)

    @property
    def gets_writes(self) -> bool:
        """Whether writes reach it: an active, or a replica following a changelog (an
        embedded standby gets none, so following its changes would wait for nothing)."""
        return self.role.is_active or self._followed

    def take_role(self, role: PartitionRole) -> None:
        """Take the role an assignment gives it. A partition that is not following a
        changelog gets writes only while active: one that stops being active ends its
        subscriptions (they would wait for nothing), to be followed where it is active."""
        with self.lock:
            got_writes = self.gets_writes
            self.role = role
            if got_writes and not self.gets_writes and not self.closed:
                self._end_changes(self._no_writes("now (a rebalance moved its active elsewhere)"))

    def _no_writes(self, since: str = "") -> str:
        """Why changes of this partition cannot be followed here (it gets no writes)."""
        when = f" {since}" if since else ""
        return (
            f"store {self.spec.name!r} partition {self.partition} is {self.role.state} here"
            f"{when}, and nothing is written to it here: follow it where it is active"
        )

    def _end_changes(self, reason: str) -> None:
        """End the subscriptions with `reason` and start a dormant feed for later ones."""
        self.changes.end(reason)
        self.changes = self._dormant_feed()

    def _dormant_feed(self) -> ChangeFeed:
        """A feed no subscription started yet: a replica's marks are changelog offsets (its
        lineage names the topic once it goes live), a partition's own are its own."""
        return ChangeFeed(CHANGELOG_LINEAGE if self._followed else new_lineage())

    def settle(self) -> None:
        """It was just restored: its engine moves its write buffers to their read-optimised
        form (`StateStore.settle`, which does not wait for that to finish). Under the lock,
        so that no commit or close runs meanwhile; RocksDB may hold it a moment, as its
        flush first waits until starting one would not stall writes."""
        with self.lock:
            if not self.closed:
                self.chain.settle()

    def close(self, reason: str | None = None) -> None:
        """Close the partition; its subscriptions end with `reason` (default: it is no
        longer hosted here)."""
        try:
            with self.lock:
                if not self.closed:
                    self.closed = True
                    self.chain.close()
        finally:  # subscriptions end even when the store's close fails
            self.changes.end(
                reason
                or f"store {self.spec.name!r} partition {self.partition} is no longer hosted "
                "here (a rebalance moved it to another instance)"
            )

    def follow_changes(
        self, settings: ChangeBufferSettings, start: Callable[[ChangeFeed, StoreChain[Any]], T]
    ) -> T:
        """`start(feed, chain)` under the lock, with the feed publishing from here on (so
        a subscription reads a snapshot or a replay point and the batches after it, with
        nothing lost or read twice in between)."""
        with self.lock:
            if self.closed:
                raise ClosedStoreError(
                    f"store {self.spec.name!r} partition {self.partition} is not open here"
                )
            if not self.gets_writes:
                raise ClosedStoreError(self._no_writes())
            feed = self.changes
            if not feed.live:
                if self._followed:
                    offset = self.committed_changelog_offset() or 0
                    feed.go_live(offset, settings, changelog_lineage(self._topic_ids.kept))
                else:
                    feed.go_live(0, settings)
            return start(feed, self.chain)

    @property
    def offsets(self) -> OffsetKeeper:
        assert self._offsets is not None, "open() first"
        return self._offsets

    @property
    def record_problem(self) -> Callable[[bytes, bytes | None], str | None] | None:
        """Why a changelog record of it cannot be applied (None: it can): it does not
        decode, or its engine cannot keep its key; None when every record can."""
        return self.spec.record_check

    @property
    def changelog_topic_ids(self) -> TopicIds:
        """The id of the changelog topic its data came from, and those it replaced."""
        return self._topic_ids

    def keep_changelog_topic_ids(self, ids: TopicIds) -> None:
        """Record the ids of its changelog topic from now on, with a persistent store's
        files (so that a restart checks them too): `OSError` when they cannot be written,
        nothing once the partition is closed."""
        with self.lock:
            if self.closed:
                return
            if self.context.directory is not None:
                keep_topic_ids(self.context.directory, ids)
            self._topic_ids = ids

    def resume_offset(self) -> int | None:
        """The changelog offset committed with the last unit (None: none, or closed)."""
        with self.lock:
            return None if self.closed else self.committed_changelog_offset()

    def committed_changelog_offset(self) -> int | None:
        if self.changelog_partition is None or self._offsets is None:
            return None
        return self._offsets.committed_offset(self.changelog_partition)

    def settled_at(self, offset: int | None) -> None:
        self._settled = offset

    def applied_offset(self) -> int:
        """How far it has applied its changelog, for its lag: the committed offset, or where
        the follower settled past records it does not apply (`settled_at`)."""
        committed = self.committed_changelog_offset() or 0
        settled = self._settled
        return committed if settled is None or settled < committed else settled

    def skips(self, batch_id: int | None) -> bool:
        """True iff this partition already committed `batch_id` (or a later batch)."""
        return batch_id is not None and self.fence is not None and batch_id <= self.fence

    def missing_batches(self, batch_id: int | None, first_batch_id: int | None = None) -> range:
        """The batch ids between this partition's fence and `batch_id` (empty if none); for
        a partition that holds nothing (no fence, position or changelog offset: not one
        restored from its changelog), those from `first_batch_id` (the pipeline's first)
        on, if it is known."""
        if batch_id is None:
            return range(0)
        if self.fence is None:
            if first_batch_id is None or not self._holds_nothing():
                return range(0)
            return range(first_batch_id, batch_id)
        return range(self.fence + 1, batch_id)

    def apply(
        self,
        entries: list[Any],
        position: Position | None,
        batch_id: int | None,
        changelog: ChangelogWriter | None,
    ) -> bool:
        """Write a batch's entries and commit them with the position and the fence, atomically.

        Returns False, changing nothing, when the fence says the batch was already applied.
        """
        with self.lock:
            if self.skips(batch_id):
                return False
            chain = self.chain
            if position is not None:
                chain.update_position(position)
            feed = self.changes
            kept = chain.kept_entries(entries) if feed.live and entries else None
            if entries:
                chain.write(entries)
            changes: dict[TopicPartition, int | None] = {}
            if changelog is not None and self.changelog_partition is not None:
                chain.prepare_commit()  # cached writes reach the changelog first
                end = changelog.flush().get(self.changelog_partition)
                if end is not None:
                    changes[self.changelog_partition] = end
            self._commit(batch_id, changes)
            if feed.live:
                feed.publish(only_kept(entries, kept), chain.position)
            return True

    def _commit(self, batch_id: int | None, changes: dict[TopicPartition, int | None]) -> None:
        """The end of every batch, from a pipeline or from a changelog (the caller holds the
        lock and has written the batch): one atomic store commit of the data, the offsets
        in `changes` and the fence (moved to `batch_id` when given), then the record that
        this partition holds committed data, then the stores' commit callbacks (a callback
        that fails is logged: the commit stands)."""
        self._commit_store(batch_id, changes)
        self._after_commit()

    def _commit_store(
        self, batch_id: int | None, changes: dict[TopicPartition, int | None]
    ) -> None:
        """`_commit`'s atomic store commit (data, offsets, fence)."""
        if batch_id is not None:
            changes[self.fence_partition] = batch_id
        elif self.fence is not None:
            changes[self.fence_partition] = self.fence
        started = time.perf_counter()
        self.offsets.commit(changes)
        if self._commit_durations is not None:
            self._commit_durations.observe(time.perf_counter() - started)
        if batch_id is not None:
            self.fence = batch_id

    def _after_commit(self) -> None:
        """What follows `_commit`'s store commit: the record that this partition holds
        committed data, then the stores' commit callbacks."""
        committed = self._committed
        if committed is not None and self.partition not in committed and not self._holds_nothing():
            committed.add(self.partition)
        try:
            self.context.run_commit_callbacks()
        except Exception:  # the commit is durable: a failing callback must not undo or repeat it
            _log.exception(
                "a commit callback of store %r partition %d failed after the commit (which stands)",
                self.spec.name,
                self.partition,
            )
