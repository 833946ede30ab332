"""Change subscriptions (SPEC 12) in embedded mode and on a replica following a changelog:
back-pressure, resumes, the ways a subscription ends, and bad input."""

from __future__ import annotations

import asyncio
import gc
import pickle
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from iqstate import (
    Application,
    Assignment,
    Change,
    HostInfo,
    InMemoryChangelog,
    InvalidCursorError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    Position,
    SerializationError,
    StateQueryRequest,
    StaticAssignment,
    SubscriptionEndedError,
    SubscriptionLaggedError,
    UnknownStateStoreError,
    VersionedKeyQuery,
)
from iqstate.context import StateStoreContext
from iqstate.keyspace import encode_window_key
from iqstate.plugins import default_registry
from iqstate.position import TopicPartition
from iqstate.runtime import ACTIVE, STANDBY, partition_for_bytes
from iqstate.runtime.changelog_topic import TopicIds
from iqstate.runtime.committed import CommittedPartitions
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.spec import PutExtras, StoreSpec
from iqstate.subscriptions.filters import KeyFilter
from iqstate.subscriptions.subscription import Subscription

MakeApp = Callable[..., Application]


def counted(app: Application, batches: range, partitions: int = 1) -> None:
    for number in batches:
        with app.begin_batch({"src": {0: number}}, batch_id=number) as batch:
            for partition in range(partitions):
                batch.put("s", f"k{partition}", number)


def test_a_stalled_subscriber_holds_back_neither_the_pipeline_nor_the_others(
    make_app: MakeApp,
) -> None:
    app = make_app()
    app.key_value_store("s", 1, value_serde="int64")
    app.start()
    stalled = app.subscribe("s", max_pending=8)
    assert next(stalled).snapshot  # it reads its snapshot, then stops reading
    readers = [app.subscribe("s") for _ in range(3)]
    received: list[list[int]] = [[] for _ in readers]

    def read(index: int) -> None:
        for batch in readers[index]:
            received[index] += [change.value for change in batch.changes]
            if received[index][-1:] == [199]:
                return

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(readers))]
    for thread in threads:
        thread.start()
    counted(app, range(200))  # every batch commits although one subscriber reads nothing
    for thread in threads:
        thread.join(timeout=60)
    assert all(not thread.is_alive() for thread in threads)
    assert received == [list(range(200))] * 3  # the others got every batch, in order
    with pytest.raises(SubscriptionLaggedError, match="fell behind") as lagged:
        next(stalled)
    assert lagged.value.cursor == stalled.cursor
    with pytest.raises(SubscriptionLaggedError):  # it stays ended
        stalled.poll()
    resumed = app.subscribe("s", from_cursor=lagged.value.cursor, max_pending=8)
    batch = next(resumed)  # 200 batches on: more than its max_pending to replay
    assert batch.snapshot and batch.changes == [Change("k0", 199)]


def test_a_subscriber_that_resumes_in_time_replays_what_it_missed(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1, value_serde="int64")
    app.start()
    subscription = app.subscribe("s", max_pending=4)
    first = next(subscription)
    counted(app, range(10))
    with pytest.raises(SubscriptionLaggedError, match="max_pending=4") as lagged:
        next(subscription)
    assert lagged.value.cursor == first.cursor
    resumed = app.subscribe("s", from_cursor=lagged.value.cursor)
    replayed = [resumed.poll() for _ in range(10)]
    assert [batch.snapshot for batch in replayed if batch] == [False] * 10
    assert [batch.changes[0].value for batch in replayed if batch] == list(range(10))
    assert resumed.poll() is None


def test_one_pipeline_batch_is_one_change_batch_per_partition_in_commit_order(
    make_app: MakeApp,
) -> None:
    app = make_app()
    app.key_value_store("s", 4, value_serde="int64")
    app.start()
    subscription = app.subscribe("s")
    assert [next(subscription).snapshot for _ in range(4)] == [True] * 4
    with app.begin_batch({"src": {0: 7}}, batch_id=1) as batch:
        for number in range(40):
            batch.put("s", f"k{number}", number)
    got = [subscription.poll() for _ in range(4)]
    assert subscription.poll() is None
    assert sorted(batch.partition for batch in got if batch) == [0, 1, 2, 3]
    assert sorted(c.value for batch in got if batch for c in batch.changes) == list(range(40))
    assert all(batch.position == Position.from_map({"src": {0: 7}}) for batch in got if batch)


def test_async_iteration_and_a_key_filter(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 2, value_serde="int64")
    app.start()

    async def follow() -> list[tuple[bool, list[Change]]]:
        seen = []
        async with asyncio.timeout(30):
            with app.subscribe("s", key="k1") as subscription:
                async for batch in subscription:
                    seen.append((batch.snapshot, batch.changes))
                    if len(seen) == 1:
                        await asyncio.to_thread(counted, app, range(3), 2)
                    if len(seen) == 4:
                        break
        return seen

    assert asyncio.run(follow()) == [
        (True, []),
        (False, [Change("k1", 0)]),
        (False, [Change("k1", 1)]),
        (False, [Change("k1", 2)]),
    ]


def test_async_subscribers_with_batches_waiting_take_turns_on_the_loop(
    make_app: MakeApp,
) -> None:
    """Subscribers on one event loop share it: one with a backlog gives the loop back now
    and then, so another (or a server's connections) is not held until it caught up."""
    app = make_app()
    app.key_value_store("s", 1, value_serde="int64")
    app.start()
    subscriptions = [app.subscribe("s", max_pending=1_000) for _ in range(2)]
    for subscription in subscriptions:
        assert subscription.poll() is not None  # the snapshots
    counted(app, range(200), 1)  # a backlog of 200 batches for each
    order: list[int] = []

    async def follow(number: int) -> None:
        received = 0
        async for _ in subscriptions[number]:
            order.append(number)
            received += 1
            if received == 200:
                return

    async def both() -> None:
        await asyncio.gather(follow(0), follow(1))

    asyncio.run(both())
    assert sorted(order) == [0] * 200 + [1] * 200
    assert 1 in order[:100], "the second subscriber waited for the first to drain its backlog"


def test_an_async_iteration_cancelled_while_it_gives_the_loop_back_loses_no_batch(
    make_app: MakeApp,
) -> None:
    """A subscriber with a backlog gives the loop back now and then; a cancellation there
    (a `wait_for` timeout, a task group cancelling) must not take a batch with it."""
    app = make_app()
    app.key_value_store("s", 1, value_serde="int64")
    app.start()
    subscription = app.subscribe("s", max_pending=1_000)
    assert subscription.poll() is not None  # the snapshot
    counted(app, range(1, 101), 1)

    async def cancel_each_pause() -> list[int]:
        values: list[int] = []
        while len(values) < 100 and values[-1:] != [100]:
            step = asyncio.ensure_future(subscription.__anext__())
            await asyncio.sleep(0)  # it runs up to its first pause, if it pauses
            if not step.done():
                step.cancel()  # at the pause: it gave the loop back before taking a batch
                with pytest.raises(asyncio.CancelledError):
                    await step
                continue
            values.append((await step).changes[0].value)
        return values

    assert asyncio.run(cancel_each_pause()) == list(range(1, 101))


def test_subscribers_in_step_read_the_same_changes_and_none_can_alter_the_others(
    make_app: MakeApp,
) -> None:
    """Subscribers in step share each batch they yield: its changes refuse to change, so
    no subscriber alters what another reads, and a copy is a list of one's own."""
    app = make_app()
    app.key_value_store("s", 1, value_serde="int64")
    app.start()
    counted(app, range(1))
    first, second = app.subscribe("s"), app.subscribe("s")
    for subscription in (first, second):
        snapshot = subscription.poll()
        assert snapshot is not None and snapshot.snapshot
        with pytest.raises(TypeError, match="cannot be changed"):
            snapshot.changes.append(Change("k9", 9))
    counted(app, range(1, 2))
    mine, theirs = first.poll(), second.poll()
    assert mine is not None and theirs is not None
    edits: list[Callable[[list[Change]], object]] = [
        lambda changes: changes.append(Change("k9", 9)),
        lambda changes: changes.__setitem__(0, Change("k9", 9)),
        lambda changes: changes.__delitem__(0),
        lambda changes: changes.sort(key=repr),
        lambda changes: changes.__iadd__([Change("k9", 9)]),
        lambda changes: changes.clear(),
    ]
    for edit in edits:
        with pytest.raises(TypeError, match=r"copy them first \(list\(batch.changes\)\)"):
            edit(mine.changes)
    assert mine.changes == theirs.changes == [Change("k0", 1)]
    own = list(mine.changes)
    own.append(Change("k9", 9))
    assert theirs.changes == [Change("k0", 1)]
    copied = pickle.loads(pickle.dumps(mine.changes))
    assert type(copied) is list and copied == [Change("k0", 1)]  # pickles as a plain list


def test_a_subscriber_far_behind_the_others_reads_what_they_read(make_app: MakeApp) -> None:
    """Subscribers in step keep what they made of only the most recent batches; one that
    comes to an older batch later works it out again, to the same changes and cursors."""
    app = make_app()
    app.key_value_store("s", 2, value_serde="int64")
    app.start()
    ahead, behind = app.subscribe("s"), app.subscribe("s", prefix="k")
    late = app.subscribe("s")
    for subscription in (ahead, behind, late):
        assert [subscription.poll() is not None for _ in range(2)] == [True, True]
    read: list[tuple[int, list[Change], str]] = []
    for number in range(30):
        with app.begin_batch({"src": {0: number}}, batch_id=number) as pipeline_batch:
            for key in range(8):
                pipeline_batch.put("s", f"k{key}", number)
        while (batch := ahead.poll()) is not None:
            read.append((batch.partition, list(batch.changes), batch.cursor))
        while behind.poll() is not None:  # another filter: results of its own
            pass
    caught_up = []
    while (batch := late.poll()) is not None:
        caught_up.append((batch.partition, list(batch.changes), batch.cursor))
    assert len(read) == 30 * len({partition for partition, _, _ in read})
    assert caught_up == read
    middle = len(read) // 2
    resumed = app.subscribe("s", from_cursor=read[middle - 1][2])
    assert [(b.partition, b.changes) for b in iter(resumed.poll, None)] == [
        (partition, changes) for partition, changes, _ in read[middle:]
    ]


def test_many_async_subscribers_on_another_threads_loop_each_get_every_batch(
    make_app: MakeApp,
) -> None:
    """A pipeline committing in one thread, 100 subscribers on an event loop in another:
    each gets every batch, whole and in commit order, as a subscriber that reads later."""
    app = make_app()
    app.key_value_store("s", 2, value_serde="int64")
    app.start()
    subscriptions = [app.subscribe("s") for _ in range(101)]
    for subscription in subscriptions:
        assert [subscription.poll() is not None for _ in range(2)] == [True, True]
    reference, followers = subscriptions[0], subscriptions[1:]

    async def follow(subscription: Subscription) -> list[tuple[int, list[Change]]]:
        seen: list[tuple[int, list[Change]]] = []
        last: set[object] = set()
        async for batch in subscription:
            seen.append((batch.partition, list(batch.changes)))
            last |= {change.key for change in batch.changes if change.value == 49}
            if len(last) == 8:
                break
        return seen

    async def everyone() -> list[list[tuple[int, list[Change]]]]:
        async with asyncio.timeout(60):
            return await asyncio.gather(*(follow(s) for s in followers))

    results: list[list[list[tuple[int, list[Change]]]]] = []
    loop_thread = threading.Thread(target=lambda: results.append(asyncio.run(everyone())))
    loop_thread.start()
    for number in range(50):
        with app.begin_batch({"src": {0: number}}, batch_id=number) as batch:
            for key in range(8):
                batch.put("s", f"k{key}", number)
    loop_thread.join(timeout=90)
    expected = [(batch.partition, list(batch.changes)) for batch in iter(reference.poll, None)]
    assert len(expected) >= 50 and results
    assert all(seen == expected for seen in results[0])


def test_a_fan_out_collects_no_garbage_where_collection_is_disabled(make_app: MakeApp) -> None:
    """A loop waking many subscribers collects garbage around them, but never in a
    process that disabled collection (`gc.disable()`, for its own latency reasons)."""
    app = make_app()
    app.key_value_store("s", 1, value_serde="int64")
    app.start()
    subscriptions = [app.subscribe("s") for _ in range(100)]
    for subscription in subscriptions:
        assert subscription.poll() is not None  # the snapshot
    collections: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    async def follow(subscription: Subscription) -> int:
        async for batch in subscription:
            return batch.changes[0].value  # type: ignore[no-any-return]
        return -1

    async def everyone() -> list[int]:
        async with asyncio.timeout(30):
            waiting = asyncio.gather(*(follow(s) for s in subscriptions))
            await asyncio.sleep(0.05)  # every subscriber waits
            await asyncio.to_thread(counted, app, range(7, 8))
            return await waiting

    gc.disable()
    gc.callbacks.append(record)
    try:
        assert asyncio.run(everyone()) == [7] * 100
    finally:
        gc.callbacks.remove(record)
        gc.enable()
    assert collections == []


def test_puts_the_store_drops_as_too_old_are_neither_announced_nor_logged(
    make_app: MakeApp,
) -> None:
    """A versioned, window or session store drops a put its retention is past (Kafka's
    do too): a subscription announces only what the store kept, so the snapshot and the
    changes after it add up to the store, and a replica following the changelog agrees."""
    log = InMemoryChangelog()
    app = make_app(changelog=log)
    typed = {"value_serde": "int64", "logging": True}
    app.versioned_key_value_store("v", 1, history_retention_ms=10, **typed)
    app.window_store("w", 1, window_size_ms=1, retention_ms=10, **typed)
    app.session_store("s", 1, retention_ms=10, **typed)
    app.start()
    subscriptions = {name: app.subscribe(name) for name in ("v", "w", "s")}
    for subscription in subscriptions.values():
        assert next(subscription).snapshot
    with app.begin_batch(batch_id=1) as batch:  # each store's time moves to 30, then 5 is too old
        batch.put("v", "a", 1, timestamp=30)
        batch.put("v", "b", 2, timestamp=5)
        batch.put("w", "a", 1, window_start=30)
        batch.put("w", "b", 2, window_start=5)
        batch.put("s", "a", 1, session=(29, 30))
        batch.put("s", "b", 2, session=(4, 5))
    with app.begin_batch(batch_id=2) as batch:  # nothing the stores keep
        batch.put("v", "c", 3, timestamp=6)
        batch.put("w", "c", 3, window_start=6)
        batch.put("s", "c", 3, session=(5, 6))
    with app.begin_batch(batch_id=3) as batch:
        batch.put("v", "d", 4, timestamp=31)
        batch.put("w", "d", 4, window_start=31)
        batch.put("s", "d", 4, session=(30, 31))
    announced = {
        name: [[change.key for change in next(subscription).changes] for _ in range(2)]
        for name, subscription in subscriptions.items()
    }
    assert announced == {name: [["a"], ["d"]] for name in ("v", "w", "s")}
    for subscription in subscriptions.values():
        assert subscription.poll() is None  # batch 2 changed nothing: not announced
    logged = {part.topic.split("-")[-2]: len(log.records(part)) for part in log.partitions()}
    assert logged == {"v": 2, "w": 2, "s": 2}  # a replica restores what the store kept


def test_close_ends_an_iteration_that_waits(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1)
    app.start()
    subscription = app.subscribe("s")
    next(subscription)
    seen: list[object] = []
    reader = threading.Thread(target=lambda: seen.extend(subscription))
    reader.start()
    subscription.close()
    reader.join(timeout=30)
    assert not reader.is_alive() and seen == []
    assert subscription.closed and subscription.poll() is None
    with pytest.raises(StopIteration):
        next(subscription)
    subscription.close()  # idempotent


def test_a_partition_that_moves_away_ends_its_subscriptions(make_app: MakeApp) -> None:
    host = HostInfo("localhost", 7070)
    assignment = StaticAssignment({host: Assignment({"s": {0: ACTIVE, 1: ACTIVE}})})
    app = make_app(assignment=assignment)
    app.key_value_store("s", 2, value_serde="int64")
    app.start()
    subscription = app.subscribe("s")
    assert [next(subscription).snapshot for _ in range(2)] == [True, True]
    assignment.rebalance({host: Assignment({"s": {0: ACTIVE}})})
    with pytest.raises(SubscriptionEndedError, match="partition 1 is no longer hosted") as ended:
        next(subscription)
    assert ended.value.cursor == subscription.cursor
    with pytest.raises(InvalidStateStorePartitionError, match=r"\[1\] are not hosted here"):
        app.subscribe("s", partitions=[1])
    assert app.subscribe("s").partitions == [0]


def test_a_partition_made_a_standby_ends_its_subscriptions(make_app: MakeApp) -> None:
    """In embedded mode a standby gets no writes: a subscription that kept following a
    partition a rebalance made a standby here would wait forever; it ends, saying where
    to follow it, and a new one leaves the standby out or is refused it. One made active
    again takes new subscriptions."""
    host = HostInfo("localhost", 7070)
    assignment = StaticAssignment({host: Assignment({"s": {0: ACTIVE, 1: ACTIVE}})})
    app = make_app(assignment=assignment)
    app.key_value_store("s", 2, value_serde="int64")
    app.start()
    subscription = app.subscribe("s", partitions=[1])
    assert next(subscription).snapshot
    assignment.rebalance({host: Assignment({"s": {0: ACTIVE, 1: STANDBY}})})
    with pytest.raises(SubscriptionEndedError, match="partition 1 is STANDBY here now"):
        next(subscription)
    with pytest.raises(InvalidStateStorePartitionError, match=r"\[1\] are standbys here"):
        app.subscribe("s", partitions=[1])
    assert app.subscribe("s").partitions == [0], "a standby is left out"
    assignment.rebalance({host: Assignment({"s": {0: ACTIVE, 1: ACTIVE}})})
    again = app.subscribe("s", partitions=[1])
    assert next(again).snapshot
    key = next(
        k
        for k in (f"k{n}" for n in range(100))
        if app.query_metadata_for_key("s", k).partition == 1
    )
    with app.begin_batch({"src": {0: 1}}, batch_id=1) as batch:
        batch.put("s", key, 5)
    assert next(again).changes == [Change(key, 5)]


def test_a_subscription_refuses_a_key_its_serde_or_partitions_leave_out(
    make_app: MakeApp,
) -> None:
    app = make_app()
    app.key_value_store("s", 4)
    app.start()
    with pytest.raises(SerializationError, match=r"store 's': key=5 is not a key .*\(string\)"):
        app.subscribe("s", key=5)
    home = partition_for_bytes(b"k", 4)
    elsewhere = (home + 1) % 4
    with pytest.raises(
        InvalidStateStoreError,
        match=f"key subscribed to is in partition {home}, which partitions=\\[{elsewhere}\\]",
    ):
        app.subscribe("s", key="k", partitions=[elsewhere])
    assert app.subscribe("s", key="k", partitions=[home, elsewhere]).partitions == [home]
    app.close()


def test_closing_the_application_ends_subscriptions(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1)
    app.start()
    subscription = app.subscribe("s")
    next(subscription)
    app.close()
    with pytest.raises(SubscriptionEndedError, match="the application closed"):
        next(subscription)


def test_bad_input_is_refused_naming_what_is_wrong(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 2, value_serde="int64")
    app.key_value_store("other", 2, value_serde="int64")
    app.start()
    good = next(app.subscribe("s")).cursor
    with pytest.raises(UnknownStateStoreError, match="'nope'"):
        app.subscribe("nope")
    with pytest.raises(InvalidCursorError, match="not a subscription cursor"):
        app.subscribe("s", from_cursor="42")
    with pytest.raises(InvalidCursorError, match="checksum"):
        app.subscribe("s", from_cursor=good[:-1] + ("0" if good[-1] != "0" else "1"))
    with pytest.raises(InvalidCursorError, match="another store"):
        app.subscribe("other", from_cursor=good)
    with pytest.raises(InvalidCursorError, match="another filter"):
        app.subscribe("s", prefix="k", from_cursor=good)
    with pytest.raises(ValueError, match="key= follows one key"):
        app.subscribe("s", key="a", lower="b")
    with pytest.raises(ValueError, match=r"key serde \(string\)"):
        app.subscribe("s", key=object())
    with pytest.raises(ValueError, match="max_pending"):
        app.subscribe("s", max_pending=0)
    with pytest.raises(InvalidStateStorePartitionError, match="partitions 0..1, not 5"):
        app.subscribe("s", partitions=[5])


def followed_replica(spec: StoreSpec, root: Path) -> HostedPartition:
    """Partition 0 of `spec` under `root`, open, as a replica following its changelog
    (`app-<store>-changelog`), as distributed mode's follower drives it."""
    directory = root / spec.name / "0"
    directory.mkdir(parents=True)
    context = StateStoreContext(
        application_id="app",
        store_name=spec.name,
        partition=0,
        directory=directory,
        changelog_partition=TopicPartition(f"app-{spec.name}-changelog", 0),
        query_handlers=default_registry().query_handlers,
    )
    hosted = HostedPartition(
        spec, 0, ACTIVE, context, CommittedPartitions(root / spec.name), followed=True
    )
    hosted.open()
    return hosted


def test_a_replica_following_a_changelog_publishes_whole_batches(tmp_path: Path) -> None:
    """The seam a distributed-mode follower drives (`apply_changelog`), with RocksDB: a
    window store's changelog keys carry the window start, and a unit cut short is held
    until its batch's marker."""
    app = Application("app", tmp_path)
    spec = app.window_store("w", 1, 10, 1000, engine="rocksdb", value_serde="int64")
    hosted = followed_replica(spec, tmp_path / "app")
    try:

        def record(key: str, start: int, value: int | None) -> tuple[bytes, bytes | None]:
            raw = spec.key_serde.serialize(key) + (start + (1 << 63)).to_bytes(8, "big")
            return raw, None if value is None else spec.value_serde.serialize(value)

        hosted.apply_changelog([record("a", 0, 1)], 1, Position.from_map({"t": {0: 1}}), 2)
        subscription = Subscription(
            "app", spec, {0: hosted}, keys=KeyFilter.build(spec, None, None, None, None)
        )
        snapshot = next(subscription)
        assert snapshot.snapshot and snapshot.changes == [Change("a", 1, window=(0, 10))]
        hosted.apply_changelog([record("b", 10, 2)], None, None, 3)  # cut short
        assert subscription.poll() is None
        hosted.apply_changelog([record("a", 0, None)], 2, Position.from_map({"t": {0: 2}}), 5)
        batch = next(subscription)
        assert batch.changes == [Change("b", 2, window=(10, 20)), Change("a", None, window=(0, 10))]
        assert batch.position == Position.from_map({"t": {0: 2}})
        # The cursor is the changelog offset: a replica of the same partition resumes it.
        assert (
            Subscription(
                "app",
                spec,
                {0: hosted},
                keys=KeyFilter.build(spec, None, None, None, None),
                from_cursor=snapshot.cursor,
            ).poll()
            == batch
        )
    finally:
        hosted.close()


def test_a_cursor_resumes_on_replicas_of_the_same_changelog_topic_only(tmp_path: Path) -> None:
    """Marks are offsets of one changelog topic: a replica reading the topic of the same id
    resumes a cursor; one reading a topic created again under the name (another id: its
    offsets start over) starts from a snapshot, never from a mark of the old topic."""
    app = Application("app", tmp_path)
    spec = app.key_value_store("s", 1, value_serde="int64")
    everything = KeyFilter.build(spec, None, None, None, None)
    topic_id, recreated_id = "qyZkaZiOQIu67m/F04s+5Q", "EeKrHgDmRYSBYL4Y2vSHLw"
    replicas = {
        name: followed_replica(spec, tmp_path / name) for name in ("one", "same", "recreated")
    }
    try:
        for name, replica in replicas.items():
            replica.keep_changelog_topic_ids(
                TopicIds(recreated_id if name == "recreated" else topic_id)
            )
            for batch in (1, 2):
                record = (spec.key_serde.serialize(f"k{batch}"), spec.value_serde.serialize(batch))
                position = Position.from_map({"t": {0: batch}})
                replica.apply_changelog([record], batch, position, 2 * batch + 2)
        cursor = next(Subscription("app", spec, {0: replicas["one"]}, keys=everything)).cursor

        same = Subscription("app", spec, {0: replicas["same"]}, keys=everything, from_cursor=cursor)
        assert same.poll() is None, "resumed where the cursor was: nothing new yet"
        recreated = Subscription(
            "app", spec, {0: replicas["recreated"]}, keys=everything, from_cursor=cursor
        )
        snapshot = recreated.poll()
        assert snapshot is not None and snapshot.snapshot
        assert sorted(change.key for change in snapshot.changes) == ["k1", "k2"]
    finally:
        for replica in replicas.values():
            replica.close()


@pytest.mark.parametrize("kind", ["window", "session", "versioned"])
def test_a_replica_announces_only_the_records_its_store_keeps(tmp_path: Path, kind: str) -> None:
    """In distributed mode the writer logs a batch's entries as they are: each replica,
    restoring them, announces only what its store kept, as a local active does, and a
    unit cut short holds only those too."""
    app = Application("app", tmp_path)
    spec = {
        "window": lambda: app.window_store("t", 1, 1, 10, value_serde="int64"),
        "session": lambda: app.session_store("t", 1, 10, value_serde="int64"),
        "versioned": lambda: app.versioned_key_value_store("t", 1, 10, value_serde="int64"),
    }[kind]()
    extras = {
        "window": lambda time: PutExtras(window_start=time),
        "session": lambda time: PutExtras(session=(time - 1, time)),
        "versioned": lambda time: PutExtras(timestamp=time),
    }[kind]

    def record(key: str, value: int, time: int) -> tuple[bytes, bytes | None]:
        entry = spec.entry(
            spec.key_serde.serialize(key), spec.value_serde.serialize(value), extras(time)
        )
        if len(entry) == 3:  # a window entry: its changelog key carries the window start
            return encode_window_key(entry[0], entry[1]), entry[2]
        return entry  # type: ignore[return-value]

    hosted = followed_replica(spec, tmp_path / "app")
    try:
        subscription = Subscription(
            "app", spec, {0: hosted}, keys=KeyFilter.build(spec, None, None, None, None)
        )
        assert next(subscription).snapshot
        at_1 = Position.from_map({"t": {0: 1}})
        hosted.apply_changelog([record("a", 1, 30), record("b", 2, 5)], 1, at_1, 3)
        assert [change.key for change in next(subscription).changes] == ["a"]
        hosted.apply_changelog([record("c", 3, 6), record("d", 4, 31)], None, None, 5)  # cut short
        hosted.apply_changelog([record("e", 5, 7)], 2, Position.from_map({"t": {0: 2}}), 7)
        assert [change.key for change in next(subscription).changes] == ["d"]
        hosted.apply_changelog([record("f", 6, 8)], 3, Position.from_map({"t": {0: 3}}), 9)
        assert subscription.poll() is None  # nothing kept: nothing announced
    finally:
        hosted.close()


def test_a_cursor_resumed_on_a_replica_that_is_behind_goes_on_without_going_back(
    tmp_path: Path,
) -> None:
    """Replicas of a partition mark batches with the same changelog offsets: a subscriber
    that moves to a replica not yet where it was waits for that replica to catch up, and
    gets neither a snapshot older than what it holds nor a batch it has seen."""
    app = Application("app", tmp_path)
    spec = app.key_value_store("s", 1, value_serde="int64")

    def apply(hosted: HostedPartition, batch: int) -> None:
        """Batch `batch` of the changelog: one record at offset 2 * batch, its marker after."""
        record = (spec.key_serde.serialize(f"k{batch}"), spec.value_serde.serialize(batch))
        position = Position.from_map({"t": {0: batch}})
        hosted.apply_changelog([record], batch, position, 2 * batch + 2)

    everything = KeyFilter.build(spec, None, None, None, None)
    ahead = followed_replica(spec, tmp_path / "ahead")
    behind = followed_replica(spec, tmp_path / "behind")
    try:
        for batch in (1, 2, 3):
            apply(ahead, batch)
        apply(behind, 1)
        seen = Subscription("app", spec, {0: ahead}, keys=everything)
        assert next(seen).snapshot
        for batch in (4, 5):
            apply(ahead, batch)
        assert [change.key for change in next(seen).changes] == ["k4"]
        cursor = next(seen).cursor  # after batch 5

        moved = Subscription("app", spec, {0: behind}, keys=everything, from_cursor=cursor)
        assert moved.poll() is None  # no snapshot of batch 1's state
        for batch in (2, 3, 4, 5):
            apply(behind, batch)
            assert moved.poll() is None  # seen on the other replica already
        apply(behind, 6)
        resumed = moved.poll()
        assert resumed is not None and not resumed.snapshot
        assert [change.key for change in resumed.changes] == ["k6"]
    finally:
        ahead.close()
        behind.close()


def test_a_cursor_inside_a_batch_resumes_with_the_whole_batch_until_a_rebuild(
    tmp_path: Path,
) -> None:
    """A cursor taken inside a batch (a unit cut short: its snapshot held part of it) resumed
    on a replica that is behind takes that whole batch when it comes (changes set values,
    so those it had already are set again), not a snapshot. Once that replica is rebuilt the
    subscriber is told so, and never given the new, empty store as a snapshot."""
    app = Application("app", tmp_path)
    spec = app.key_value_store("s", 1, value_serde="int64")
    everything = KeyFilter.build(spec, None, None, None, None)

    def record(key: str, value: int) -> tuple[bytes, bytes]:
        return spec.key_serde.serialize(key), spec.value_serde.serialize(value)

    ahead = followed_replica(spec, tmp_path / "ahead")
    behind = followed_replica(spec, tmp_path / "behind")
    try:
        ahead.apply_changelog([record("a", 1)], 1, Position.from_map({"t": {0: 1}}), 2)
        ahead.apply_changelog([record("b", 2)], None, None, 3)  # a unit cut short
        snapshot = next(Subscription("app", spec, {0: ahead}, keys=everything))  # at 3
        assert snapshot.changes == [Change("a", 1), Change("b", 2)]
        behind.apply_changelog([record("a", 1)], 1, Position.from_map({"t": {0: 1}}), 2)
        moved = Subscription("app", spec, {0: behind}, keys=everything, from_cursor=snapshot.cursor)
        assert moved.poll() is None  # behind the cursor: it waits
        whole = [record("b", 2), record("c", 3)]
        behind.apply_changelog(whole, 2, Position.from_map({"t": {0: 2}}), 4)
        batch = moved.poll()
        assert batch is not None and not batch.snapshot
        assert batch.changes == [Change("b", 2), Change("c", 3)]
        behind.rebuild(TopicIds(None))
        with pytest.raises(SubscriptionEndedError, match="rebuilt"):
            moved.poll()
        with pytest.raises(SubscriptionEndedError):
            moved.poll()  # and stays ended
    finally:
        ahead.close()
        behind.close()


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "lmdb"])
@pytest.mark.parametrize("logging", [False, True])
def test_a_versioned_snapshot_holds_a_deleted_keys_tombstone(
    make_app: MakeApp, engine: str, logging: bool
) -> None:
    """A key's current value is its newest change: a snapshot without the tombstone of a
    deleted key would make a later put older than it read as the current value."""
    extra: dict[str, object] = {"changelog": InMemoryChangelog()} if logging else {}
    app = make_app(**extra)
    app.versioned_key_value_store("v", 1, 1000, engine=engine, value_serde="int64",
                                  logging=logging)  # fmt: skip
    app.start()
    with app.begin_batch({"src": {0: 1}}, batch_id=1) as batch:
        batch.put("v", "k", 1, timestamp=10)
        batch.put("v", "j", 2, timestamp=11)
    with app.begin_batch({"src": {0: 2}}, batch_id=2) as batch:
        batch.delete("v", "k", timestamp=87)
    for keys in ({"key": "k"}, {"prefix": "k"}, {"lower": "k", "upper": "z"}):
        filtered = app.subscribe("v", **keys).poll()
        assert filtered is not None and filtered.snapshot
        assert filtered.changes == [Change("k", None, timestamp=87)], keys
    subscription = app.subscribe("v")
    snapshot = subscription.poll()
    assert snapshot is not None and snapshot.snapshot
    assert snapshot.changes == [Change("j", 2, timestamp=11), Change("k", None, timestamp=87)]
    with app.begin_batch({"src": {0: 3}}, batch_id=3) as batch:
        batch.put("v", "k", 5, timestamp=53)  # older than the tombstone: k stays deleted
    later = subscription.poll()
    assert later is not None and later.changes == [Change("k", 5, timestamp=53)]
    newest: dict[str, Change] = {}  # the subscriber's rule: the newest change is current
    for change in [*snapshot.changes, *later.changes]:
        held = newest.get(change.key)
        if held is None or held.timestamp < change.timestamp:  # type: ignore[operator]
            newest[change.key] = change
    request = StateQueryRequest.in_store("v").with_query(VersionedKeyQuery.with_key("k"))
    answer = app.query(request).partition_results[0]
    assert answer.is_success and answer.result is None  # the store says k is deleted too
    assert newest["k"].value is None and newest["j"].value == 2


def test_a_cursor_at_a_batch_that_changed_nothing_resumes_on_another_replica(
    tmp_path: Path,
) -> None:
    """Replica X's feed went live after a batch that changed no key of the partition (a
    marker only: the batch wrote other partitions); replica Y's went live before it and
    published nothing for it. X's cursor resumes on Y without a snapshot."""
    app = Application("app", tmp_path)
    spec = app.key_value_store("s", 1, value_serde="int64")
    x, y = followed_replica(spec, tmp_path / "x"), followed_replica(spec, tmp_path / "y")
    everything = KeyFilter.build(spec, None, None, None, None)

    def record(key: str, value: int) -> tuple[bytes, bytes | None]:
        return spec.key_serde.serialize(key), spec.value_serde.serialize(value)

    try:
        for replica in (x, y):
            replica.apply_changelog([record("a", 1)], 1, Position.from_map({"t": {0: 1}}), 2)
        on_y = Subscription("app", spec, {0: y}, keys=everything)
        assert next(on_y).snapshot  # Y's feed goes live at offset 2
        for replica in (x, y):  # batch 2 changed no key here
            replica.apply_changelog([], 2, Position.from_map({"t": {0: 2}}), 4)
        on_x = Subscription("app", spec, {0: x}, keys=everything)
        snapshot = next(on_x)  # X's feed goes live at offset 4
        assert snapshot.snapshot and snapshot.changes == [Change("a", 1)]
        for replica in (x, y):
            replica.apply_changelog([record("b", 2)], 3, Position.from_map({"t": {0: 3}}), 6)
        for resumed in (
            Subscription("app", spec, {0: y}, keys=everything, from_cursor=snapshot.cursor),
            on_x,
            on_y,
        ):
            batch = next(resumed)
            assert not batch.snapshot and batch.changes == [Change("b", 2)]
            assert batch.position == Position.from_map({"t": {0: 3}})
    finally:
        x.close()
        y.close()
