"""`Subscription`: a store's committed changes, followed from a snapshot or a cursor.

A subscription reads the feeds (`ChangeFeed`) of the partitions it follows, each at its
own index, on the caller's thread: decoding, filtering and cursors cost the subscriber,
never the committer. Per partition it yields a snapshot first (or resumes after a cursor's
batch from the replay buffer), then every committed batch that changed a matching key,
whole and in commit order; across partitions in the order the batches were committed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from iqstate.errors import (
    ClosedStoreError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
)
from iqstate.layers.chain import StoreChain
from iqstate.position import Position
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.spec import StoreSpec
from iqstate.subscriptions.changes import Change, ChangeBatch, ReadOnlyChanges
from iqstate.subscriptions.cursor import Cursor, Progress, resumed_cursor
from iqstate.subscriptions.decoding import decoder_for, read_snapshot
from iqstate.subscriptions.errors import (
    SubscriptionEndedError,
    SubscriptionLaggedError,
)
from iqstate.subscriptions.feed import (
    FELL_OUT,
    SHARED_AT_MOST,
    ChangeBufferSettings,
    ChangeFeed,
    PublishedBatch,
)
from iqstate.subscriptions.filters import KeyFilter
from iqstate.subscriptions.waking import Waker, start_waking, wake

DEFAULT_MAX_PENDING = 256
"""Batches of one partition a subscriber may leave unread before it is disconnected: a
quarter of the default replay buffer, so one that resumes at once still replays from
memory instead of starting over from a snapshot."""


class _Partition:
    """One followed partition: where the subscription reads its feed."""

    __slots__ = ("after", "feed", "hosted", "index", "number", "peeked")

    def __init__(self, hosted: HostedPartition, feed: ChangeFeed) -> None:
        self.number = hosted.partition
        self.hosted = hosted
        self.feed = feed
        self.index = 0
        """The feed index of the next batch to read."""
        self.peeked: PublishedBatch | None = None
        """The batch at `index`, once read and until taken: finding the earliest batch of
        the partitions reads only those whose next one is not known yet."""
        self.after = 0
        """The mark of the last batch accounted for (yielded, or matched nothing)."""


@dataclass(frozen=True)
class _Snapshot:
    part: _Partition
    rows: list[Any]
    mark: int
    position: Position


_YIELD_EVERY = 16
"""Batches an async iteration returns in a row, without waiting, before it lets the event
loop run its other tasks once."""


class Subscription:
    """A closeable iterator (sync and async) of `ChangeBatch`es; see `Application.subscribe`.

    Iterate from one thread (or one task) at a time; `close()` may be called from any
    thread, and ends an iteration waiting for the next batch (it stops, as a finished
    iterator does). An iteration ended by the instance raises `SubscriptionEndedError`
    (`SubscriptionLaggedError` when the subscriber fell behind), whose `cursor` resumes.
    """

    def __init__(
        self,
        application_id: str,
        spec: StoreSpec,
        hosted: Mapping[int, HostedPartition],
        *,
        keys: KeyFilter,
        partitions: Iterable[int] | None = None,
        from_cursor: str | None = None,
        settings: ChangeBufferSettings | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"max_pending must be an int >= 1, got {max_pending!r}")
        self.store = spec.name
        self._spec = spec
        self._keys = keys
        self._decode = decoder_for(spec)
        self._settings = settings or ChangeBufferSettings()
        self._max_pending = max_pending
        self._cursor = self._resumed(application_id, from_cursor)
        self._ready: deque[_Snapshot] = deque()
        self._closed = False
        self._failure: SubscriptionEndedError | None = None
        self._event = threading.Event()
        self._waker = Waker(event=self._event)
        self._async_waker: Waker | None = None
        self._ready_in_a_row = 0
        self._reading = threading.Lock()
        self._parts: list[_Partition] = []
        start_waking()
        for number in self._chosen(hosted, partitions):
            self._parts.append(self._start(hosted[number]))

    # -- starting ------------------------------------------------------------------------------

    def _resumed(self, application_id: str, text: str | None) -> Cursor:
        return resumed_cursor(
            text, application_id, self.store, self._keys.identity, self._spec.partitions
        )

    def _chosen(
        self, hosted: Mapping[int, HostedPartition], partitions: Iterable[int] | None
    ) -> list[int]:
        name, count = self.store, self._spec.partitions
        if partitions is None:
            key_partition = self._keys.partition
            wanted = (
                sorted(number for number, each in hosted.items() if each.gets_writes)
                if key_partition is None
                else [key_partition]
            )
        else:
            wanted = sorted(set(partitions))
            for number in wanted:
                if isinstance(number, bool) or not isinstance(number, int):
                    raise TypeError(f"partitions must be ints, got {number!r}")
                if not 0 <= number < count:
                    raise InvalidStateStorePartitionError(
                        f"store {name!r} has partitions 0..{count - 1}, not {number}"
                    )
            key_partition = self._keys.partition
            if key_partition is not None and key_partition not in wanted:
                raise InvalidStateStoreError(
                    f"store {name!r}: the key subscribed to is in partition {key_partition}, "
                    f"which partitions={sorted(wanted)} leaves out (a key's changes are all in "
                    "its partition: leave partitions out)"
                )
            if key_partition is not None:
                wanted = [key_partition]
        missing = [number for number in wanted if number not in hosted]
        if missing:
            raise InvalidStateStorePartitionError(
                f"store {name!r} partition(s) {missing} are not hosted here; subscribe on "
                "the instance that hosts them (app.query_metadata_for_key finds it)"
            )
        silent = [number for number in wanted if not hosted[number].gets_writes]
        if silent:
            raise InvalidStateStorePartitionError(
                f"store {name!r} partition(s) {silent} are standbys here, which get no "
                "writes in embedded mode; subscribe where they are active "
                "(app.query_metadata_for_key finds it)"
            )
        if not wanted:
            raise InvalidStateStoreError(
                f"no partition of store {name!r} to follow here"
                + ("" if partitions is None else f" among partitions {sorted(partitions)}")
            )
        return wanted

    def _start(self, hosted: HostedPartition) -> _Partition:
        progress = self._cursor.progress.get(hosted.partition)

        def start(feed: ChangeFeed, chain: StoreChain[Any]) -> _Partition:
            part = _Partition(hosted, feed)
            if progress is not None and progress.lineage == feed.lineage:
                index = feed.index_after(progress.mark)
                # A replay longer than max_pending would disconnect it at once: start over.
                if index is not None and feed.head - index <= self._max_pending:
                    part.index, part.after = index, progress.mark
                    return part
            self._snapshot(part, feed, chain)
            return part

        try:
            return hosted.follow_changes(self._settings, start)
        except ClosedStoreError as closed:
            self.close()
            raise SubscriptionEndedError(str(closed), self._cursor.text) from None

    def _snapshot(self, part: _Partition, feed: ChangeFeed, chain: StoreChain[Any]) -> None:
        """Queue a snapshot of the partition (under its lock) and read on after it."""
        rows = read_snapshot(self._spec, chain, self._keys)
        part.index, part.after, part.peeked = feed.head, feed.last_mark, None
        self._ready.append(_Snapshot(part, rows, feed.last_mark, chain.position))

    def _resnapshot(self, part: _Partition, feed: ChangeFeed, chain: StoreChain[Any]) -> bool:
        """Snapshot a partition met with a gap; False, snapshotting nothing, when its feed
        is not the one followed (the replica was rebuilt: it holds other data now)."""
        if feed is not part.feed:
            return False
        self._snapshot(part, feed, chain)
        return True

    # -- reading -------------------------------------------------------------------------------

    @property
    def partitions(self) -> list[int]:
        """The partitions this subscription follows."""
        return [part.number for part in self._parts]

    @property
    def cursor(self) -> str:
        """The cursor after the last batch yielded (the `from_cursor` before the first)."""
        return self._cursor.text

    @property
    def closed(self) -> bool:
        return self._closed

    def _step(self) -> ChangeBatch | None:
        """The next batch if one is ready, None if none is; raises `StopIteration` once
        closed and the error that ended the subscription once it ended."""
        with self._reading:
            while True:
                if self._closed:
                    raise StopIteration
                if self._failure is not None:
                    raise self._failure
                if self._ready:
                    return self._snapshot_batch(self._ready.popleft())
                found = self._earliest()
                if found is None and (ended := self._ended()) is not None:
                    # A feed ends after its last publication: all of it is visible now.
                    found = self._earliest()
                    if found is None:
                        self._end(ended)
                if found is None:
                    return None
                part, item = found
                part.index += 1
                part.peeked = None
                batch = self._batch(part, item)
                if batch is not None:
                    return batch

    def _earliest(self) -> tuple[_Partition, PublishedBatch] | None:
        best: tuple[_Partition, PublishedBatch] | None = None
        empty: list[_Partition] = []
        # The first `suspects` of the `empty` partitions were read before `best` was: each
        # may have had a batch published since, and before `best`. (One found empty after
        # `best` was read cannot: what is published there later follows `best`.)
        suspects = 0
        for part in self._parts:
            if (known := part.peeked) is not None:
                if best is None or known.order < best[1].order:
                    best, suspects = (part, known), 0
                continue
            item, unread = part.feed.read(part.index)
            if item is FELL_OUT:
                self._fail(
                    f"the subscriber fell behind store {self.store!r} partition {part.number}: "
                    "the batches it had not read left the replay buffer"
                )
            if unread > self._max_pending:
                self._fail(
                    f"the subscriber fell behind store {self.store!r} partition {part.number}: "
                    f"{unread} batches unread, more than max_pending={self._max_pending}"
                )
            if isinstance(item, PublishedBatch):
                part.peeked = item
                if best is None or item.order < best[1].order:
                    best, suspects = (part, item), len(empty)
            else:
                empty.append(part)
        for part in empty[:suspects]:
            item, _ = part.feed.read(part.index)
            if isinstance(item, PublishedBatch):
                part.peeked = item
                if best is None or item.order < best[1].order:
                    best = (part, item)
        return best

    def _batch(self, part: _Partition, item: PublishedBatch) -> ChangeBatch | None:
        if item.mark <= part.after:
            return None  # already accounted for (a replica replaying its changelog)
        if item.previous > part.after:  # a gap: only a snapshot can bring the caller on
            try:
                same_feed = part.hosted.follow_changes(
                    self._settings, lambda feed, chain: self._resnapshot(part, feed, chain)
                )
            except ClosedStoreError as closed:
                self._end(part.feed.ended or str(closed))
            if not same_feed:
                self._end(
                    part.feed.ended
                    or f"store {self.store!r} partition {part.number} was rebuilt here: "
                    "subscribe again for a snapshot"
                )
            return None
        part.after = item.mark
        # Subscribers at this cursor (which names their filter) make the same of this
        # batch: the first works it out, the others (a fan-out in step) take its result
        # and yield the same (read-only) batch.
        shared_as = self._cursor.text
        # One read of the dict: a subscriber whose decoding drops this batch's results
        # (`keep_decoded`) meanwhile gives it a new one, which this must not fill.
        results = item.shared
        shared = results.get(shared_as)
        if shared is None:
            cursor = self._cursor.advanced(part.number, Progress(part.feed.lineage, item.mark))
            changes = self._matching(part.feed, item)
            batch = (
                ChangeBatch(
                    part.number, item.position, cursor.text, False, ReadOnlyChanges(changes)
                )
                if changes
                else None
            )
            shared = (cursor, batch)
            if item.decoded is not None and len(results) < SHARED_AT_MOST:
                results[shared_as] = shared
        self._cursor, batch = shared
        return batch

    def _matching(self, feed: ChangeFeed, item: PublishedBatch) -> list[Change]:
        """The changes of `item` this subscription's keys match, in write order."""
        decoded = item.decoded
        if decoded is None:
            decoded = [self._decode(entry) for entry in item.entries]
            feed.keep_decoded(item, decoded)
        keys = self._keys
        if keys.everything:
            return [change for _, change in decoded]
        matches = keys.matches
        return [change for key, change in decoded if matches(key)]

    def _snapshot_batch(self, snapshot: _Snapshot) -> ChangeBatch:
        part = snapshot.part
        self._cursor = self._cursor.advanced(
            part.number, Progress(part.feed.lineage, snapshot.mark)
        )
        decode = self._decode
        changes = ReadOnlyChanges(decode(row)[1] for row in snapshot.rows)
        return ChangeBatch(part.number, snapshot.position, self._cursor.text, True, changes)

    def _ended(self) -> str | None:
        """Why a followed feed ended (the first one's reason); None while all run."""
        for part in self._parts:
            if (reason := part.feed.ended) is not None:
                return reason
        return None

    def _end(self, reason: str) -> None:
        self._failure = SubscriptionEndedError(reason, self._cursor.text)
        self._detach()
        raise self._failure

    def _fail(self, reason: str) -> None:
        self._failure = SubscriptionLaggedError(reason, self._cursor.text)
        self._detach()
        raise self._failure

    def _detach(self) -> None:
        self._forget(self._waker)
        if self._async_waker is not None:
            self._forget(self._async_waker)

    def _forget(self, waker: Waker) -> None:
        for part in self._parts:
            part.feed.forget(waker)

    def _register(self, waker: Waker) -> bool:
        """Register `waker` with every feed; False when something is to be read already."""
        return all(part.feed.wait(part.index, waker) for part in self._parts)

    # -- the iterator protocols ------------------------------------------------------------------

    def poll(self) -> ChangeBatch | None:
        """The next batch if one is ready now, else None (also once closed); never waits.
        Raises what ended the subscription, as iterating does."""
        try:
            return self._step()
        except StopIteration:
            return None

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> ChangeBatch:
        while True:
            batch = self._step()
            if batch is not None:
                return batch
            self._event.clear()
            if self._register(self._waker) and not self._closed:
                self._event.wait()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> ChangeBatch:
        import asyncio  # loaded by whoever runs the loop; `import iqstate` does not load it

        loop = asyncio.get_running_loop()
        while True:
            if self._ready_in_a_row >= _YIELD_EVERY:
                # A subscriber with batches waiting would otherwise never give the loop back:
                # every other task on it (other subscribers, a server's connections) would
                # wait until it caught up. Before a batch is taken: cancelled here, the
                # caller loses none.
                self._ready_in_a_row = 0
                await asyncio.sleep(0)
            try:
                batch = self._step()
            except StopIteration:
                raise StopAsyncIteration from None
            if batch is not None:
                self._ready_in_a_row += 1
                return batch
            self._ready_in_a_row = 0
            future: asyncio.Future[None] = loop.create_future()
            waker = self._async_waker
            if waker is None or waker.loop is not loop:
                if waker is not None:
                    self._forget(waker)
                waker = self._async_waker = Waker(loop=loop)
            # One waker per loop, re-armed: a new one per wait stayed registered with every
            # partition that published nothing meanwhile, one more per wake-up.
            waker.arm(future)
            if self._register(waker) and not self._closed:
                await future

    def close(self) -> None:
        """Stop following (idempotent): an iteration in progress ends, as finished."""
        self._closed = True
        self._detach()
        self._event.set()
        if self._async_waker is not None:
            wake([self._async_waker])

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "ended" if self._failure else "open"
        return f"Subscription(store={self.store!r}, partitions={self.partitions}, {state})"
