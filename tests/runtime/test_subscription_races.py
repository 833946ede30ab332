"""Subscriptions read their feeds without a lock while the pipeline publishes: each test
here runs the committer (or a rebalance) at the exact point of a reader's step where a
thread switch once made the subscriber yield out of order, end early or hold memory."""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from test_subscriptions import followed_replica

from iqstate import Application, Assignment, HostInfo, StaticAssignment, SubscriptionEndedError
from iqstate.position import Position
from iqstate.runtime import ACTIVE
from iqstate.subscriptions.feed import (
    DECODED_KEPT,
    ChangeBufferSettings,
    ChangeFeed,
    PublishedBatch,
    estimated_size,
    new_lineage,
)
from iqstate.subscriptions.filters import KeyFilter
from iqstate.subscriptions.subscription import Subscription
from iqstate.subscriptions.waking import Waker

MakeApp = Callable[..., Application]


def key_in(app: Application, store: str, partition: int) -> str:
    """A key of `store` that lives in `partition`."""
    for number in range(1000):
        metadata = app.query_metadata_for_key(store, f"k{number}")
        if metadata is not None and metadata.partition == partition:
            return f"k{number}"
    raise AssertionError(f"no key of {store!r} in partition {partition}")


def commit(app: Application, number: int, *puts: tuple[str, int]) -> None:
    with app.begin_batch({"src": {0: number}}, batch_id=number) as batch:
        for key, value in puts:
            batch.put("s", key, value)


def run_after_an_empty_read(
    monkeypatch: pytest.MonkeyPatch, step: Callable[[], None], nth: int = 1
) -> None:
    """Run `step` (another thread's) right after the `nth` read that finds a feed empty."""
    read = ChangeFeed.read
    empty_reads = 0

    def read_then_step(feed: ChangeFeed, index: int) -> tuple[object, int]:
        nonlocal empty_reads
        item, unread = read(feed, index)
        if item is None:
            empty_reads += 1
            if empty_reads == nth:
                step()
        return item, unread

    monkeypatch.setattr(ChangeFeed, "read", read_then_step)


def test_batches_published_while_a_subscriber_looks_come_in_commit_order(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit to partition 0 and then one to partition 1, both published between the
    subscriber finding partition 0 empty and reading partition 1: it still yields
    partition 0's first, as a subscriber that reads later does."""
    app = make_app()
    app.key_value_store("s", 2, value_serde="int64")
    app.start()
    first, second = key_in(app, "s", 0), key_in(app, "s", 1)
    subscription = app.subscribe("s")
    assert [subscription.poll() is not None for _ in range(2)] == [True, True]
    reference = app.subscribe("s")
    assert [reference.poll() is not None for _ in range(2)] == [True, True]

    def two_commits() -> None:
        commit(app, 1, (first, 1))
        commit(app, 2, (second, 2))

    run_after_an_empty_read(monkeypatch, two_commits)
    got = [(batch.partition, batch.changes[0].value) for batch in iter(subscription.poll, None)]
    expected = [(batch.partition, batch.changes[0].value) for batch in iter(reference.poll, None)]
    assert got == expected == [(0, 1), (1, 2)]


class _PublishedBeforeIndexing(deque[PublishedBatch]):
    """A feed's buffer on which a publication runs between a reader reading the buffer's
    base and indexing it: the other thread's step at that point."""

    def __init__(self, items: deque[PublishedBatch], publication: Callable[[], None]) -> None:
        super().__init__(items)
        self.publication: Callable[[], None] | None = publication

    def __getitem__(self, index: Any) -> Any:
        if (publication := self.publication) is not None:
            self.publication = None
            publication()
        return super().__getitem__(index)


def test_a_read_racing_a_publication_that_evicts_batches_still_finds_its_batch() -> None:
    """The buffer's byte bound lets one large batch evict several small ones; a reader
    whose index is past the shortened buffer (with its old base) gets its batch, not
    'nothing published yet' (which let a subscription take another partition's later
    batch first, and `poll()` answer None with batches waiting)."""
    feed = ChangeFeed(new_lineage())
    entry = (b"k", b"12345678")
    size = estimated_size([entry])
    position = Position.from_map({"src": {0: 1}})
    feed.go_live(0, ChangeBufferSettings(bytes=7 * size))
    for _ in range(6):
        feed.publish([entry], position)  # indexes 0..5
    # indexes 0, 1 and 2 make way for a batch of four entries: the buffer holds 3..6
    feed._items = _PublishedBeforeIndexing(feed._items, lambda: feed.publish([entry] * 4, position))
    item, unread = feed.read(4)
    assert feed.head == 7
    assert isinstance(item, PublishedBatch) and item.index == 4 and unread == 3


def test_a_batch_published_just_before_the_partition_moves_away_is_read_first(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last commit to a partition and the rebalance that moves it away, both between
    the subscriber finding it empty and looking for the end: the subscriber gets that
    batch, then the end (with a cursor after it), as one that reads a moment later does."""
    host = HostInfo("localhost", 7070)
    assignment = StaticAssignment({host: Assignment({"s": {0: ACTIVE, 1: ACTIVE}})})
    app = make_app(assignment=assignment)
    app.key_value_store("s", 2, value_serde="int64")
    app.start()
    key = key_in(app, "s", 1)
    subscription = app.subscribe("s")
    assert [subscription.poll() is not None for _ in range(2)] == [True, True]

    def commit_and_move_away() -> None:
        commit(app, 1, (key, 1))
        assignment.rebalance({host: Assignment({"s": {0: ACTIVE}})})

    run_after_an_empty_read(monkeypatch, commit_and_move_away, nth=2)  # partition 1's read
    got = subscription.poll()
    assert got is not None and (got.partition, got.changes[0].value) == (1, 1)
    with pytest.raises(SubscriptionEndedError, match="partition 1 is no longer hosted") as ended:
        subscription.poll()
    assert ended.value.cursor == got.cursor


def test_an_async_subscriber_holds_no_memory_per_wait_on_a_quiet_partition(
    make_app: MakeApp,
) -> None:
    """An async subscription waits on every partition it follows; one that only ever hears
    from partition 1 keeps no leftover per wake-up on quiet partition 0."""
    app = make_app()
    app.key_value_store("s", 2, value_serde="int64")
    app.start()
    busy = key_in(app, "s", 1)
    subscription = app.subscribe("s")

    def wakers() -> int:
        gc.collect()
        return sum(isinstance(thing, Waker) for thing in gc.get_objects())

    async def follow() -> int:
        loop = asyncio.get_running_loop()
        assert [(await anext(subscription)).snapshot for _ in range(2)] == [True, True]
        before = wakers()
        for number in range(1, 51):
            waiting = asyncio.ensure_future(anext(subscription))
            await asyncio.sleep(0.001)  # it waits on both partitions now
            await loop.run_in_executor(None, commit, app, number, (busy, number))
            batch = await asyncio.wait_for(waiting, 10)
            assert (batch.partition, batch.changes[0].value) == (1, number)
        return wakers() - before

    assert asyncio.run(follow()) <= 1
    subscription.close()


def test_a_batch_whose_decoding_was_dropped_keeps_no_shared_result(tmp_path: Path) -> None:
    """Subscribers in step share what they make of the newest decoded batches only: one
    storing its result while another's decoding drops the batch from those leaves the
    batch without it (it would hold decoded changes until it left the replay buffer)."""
    spec = Application("app", tmp_path).key_value_store("s", 1, value_serde="int64")
    hosted = followed_replica(spec, tmp_path / "app")
    try:
        subscription = Subscription(
            "app", spec, {0: hosted}, keys=KeyFilter.build(spec, None, None, None, None)
        )
        assert next(subscription).snapshot
        feed = hosted.changes
        for number in range(1, DECODED_KEPT + 2):
            record = (spec.key_serde.serialize("k"), spec.value_serde.serialize(number))
            position = Position.from_map({"t": {0: number}})
            hosted.apply_changelog([record], number, position, 2 * number)
        batches = [feed.read(index)[0] for index in range(DECODED_KEPT + 1)]
        assert all(isinstance(batch, PublishedBatch) for batch in batches)
        first, *others = cast(list[PublishedBatch], batches)

        class DecodedMeanwhile(dict[str, tuple[Any, Any]]):
            """The batch's shared results, on which another subscriber decodes the next
            batches (dropping this one's) as this one stores its result."""

            def __len__(self) -> int:
                for batch in others:
                    feed.keep_decoded(batch, [])
                return super().__len__()

        first.shared = DecodedMeanwhile()
        got = subscription.poll()
        assert got is not None and got.changes[0].value == 1
        assert first.decoded is None and first.shared == {}
    finally:
        hosted.close()
