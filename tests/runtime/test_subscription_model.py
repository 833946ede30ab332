"""A subscriber's reconstructed view against a model of the store, through batches, deletes,
resumes, snapshots and subscribers that fall behind (SPEC 12), for every store type on the
memory and RocksDB engines.

The view is what a client following the batches builds: a snapshot replaces what it holds
of a partition, a change sets (or, with `None`, deletes) one key in one window. After
every batch, every subscriber that read up to it holds exactly the matching part of the
store at that batch's position.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from iqstate import (
    Application,
    ChangeBatch,
    ChangeBufferSettings,
    Position,
    Subscription,
    SubscriptionLaggedError,
)

KEYS = ["a", "ab", "abc", "b", "ba", "c"]
Slot = tuple[str, tuple[int, int] | None]
"""A view's key: the record key and its window (window and session stores)."""
Held = tuple[Any, int | None]
"""A view's value: the value and its timestamp (timestamped and versioned stores)."""
WINDOW = 10
RETAINED = 1 << 40


@dataclass
class StoreType:
    """How the machine writes one type of store, and what each write does to the model."""

    name: str
    partitions: int

    def declare(self, app: Application, engine: str) -> None:
        common: dict[str, Any] = {"engine": engine, "value_serde": "int64"}
        if self.name == "key_value":
            app.key_value_store("s", self.partitions, **common)
        elif self.name == "global_key_value":
            app.global_key_value_store("s", **common)
        elif self.name == "timestamped_key_value":
            app.timestamped_key_value_store("s", self.partitions, **common)
        elif self.name == "versioned_key_value":
            app.versioned_key_value_store("s", self.partitions, RETAINED, **common)
        elif self.name == "window":
            app.window_store("s", self.partitions, WINDOW, RETAINED, **common)
        else:
            app.session_store("s", self.partitions, RETAINED, **common)

    def write(self, batch: Any, key: str, value: int | None, slot: int, time: int) -> Slot:
        """Put (or delete, for `None`) `key`; the view slot it changes."""
        if self.name == "window":
            batch.put("s", key, value, window_start=slot * WINDOW)
            return key, (slot * WINDOW, slot * WINDOW + WINDOW)
        if self.name == "session":
            batch.put("s", key, value, session=(slot, slot + 5))
            return key, (slot, slot + 5)
        if self.name in ("timestamped_key_value", "versioned_key_value"):
            batch.put("s", key, value, timestamp=time)
        else:
            batch.put("s", key, value)
        return key, None

    def held(self, value: int, time: int) -> Held:
        stamped = self.name in ("timestamped_key_value", "versioned_key_value")
        return value, time if stamped else None


TYPES = [
    StoreType("key_value", 3),
    StoreType("global_key_value", 1),
    StoreType("timestamped_key_value", 2),
    StoreType("versioned_key_value", 2),
    StoreType("window", 2),
    StoreType("session", 2),
]
FILTERS = st.one_of(
    st.just({}),
    st.sampled_from(KEYS).map(lambda key: {"key": key}),
    st.sampled_from(KEYS).map(lambda prefix: {"prefix": prefix}),
    st.tuples(st.sampled_from(KEYS), st.sampled_from(KEYS)).map(
        lambda bounds: {"lower": min(bounds), "upper": max(bounds)}
    ),
    st.sampled_from(KEYS).map(lambda upper: {"upper": upper}),
)
WRITES = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.none() | st.integers(-5, 5),
        st.integers(0, 2),
    ),
    max_size=6,
)


def matches(keys: dict[str, str], key: str) -> bool:
    """The filter on the string serde's bytes, as the store compares them."""
    raw = key.encode()
    if "key" in keys:
        return raw == keys["key"].encode()
    if "prefix" in keys:
        return raw.startswith(keys["prefix"].encode())
    return ("lower" not in keys or raw >= keys["lower"].encode()) and (
        "upper" not in keys or raw <= keys["upper"].encode()
    )


@dataclass
class Follower:
    """One subscriber and the view it reconstructed, per partition."""

    keys: dict[str, str]
    subscription: Subscription
    views: dict[int, dict[Slot, Held]] = field(default_factory=dict)
    saved: list[tuple[str, dict[int, dict[Slot, Held]]]] = field(default_factory=list)
    """Cursors it was given, with its views as they were after that batch."""
    lazy: bool = False


class SubscriptionMachine(RuleBasedStateMachine):
    store_type: StoreType
    engine: str

    followers = Bundle("followers")

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="iqstate-subscriptions-"))
        self.app = Application(
            "subs",
            self.directory,
            change_buffer=ChangeBufferSettings(batches=4, bytes=1 << 20),
        )
        self.store_type.declare(self.app, self.engine)
        self.app.start()
        self.spec = self.app.stores["s"]
        self.model: dict[int, dict[Slot, Held]] = {p: {} for p in range(self.store_type.partitions)}
        self.batches = 0
        self.position = Position.empty()
        self.written: dict[int, list[tuple[Slot, Held | None]]] = {}
        self.open: list[Follower] = []
        self.history: dict[int, dict[int, dict[Slot, Held]]] = {0: self.copy()}
        """The store after each batch, by batch number (the source offset it commits)."""

    def copy(self) -> dict[int, dict[Slot, Held]]:
        return {partition: dict(view) for partition, view in self.model.items()}

    def teardown(self) -> None:
        self.app.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def partition_of(self, key: str) -> int:
        return self.spec.partition_of(key, self.spec.key_serde.serialize(key))

    # -- the pipeline ----------------------------------------------------------------------

    @rule(writes=WRITES)
    def commit_batch(self, writes: list[tuple[str, int | None, int]]) -> None:
        self.batches += 1
        time = self.batches
        self.position = Position.from_map({"source": {0: self.batches}})
        self.written = {}
        with self.app.begin_batch(self.position, batch_id=self.batches) as batch:
            for key, value, slot in writes:
                view_key = self.store_type.write(batch, key, value, slot, time)
                held = None if value is None else self.store_type.held(value, time)
                self.written.setdefault(self.partition_of(key), []).append((view_key, held))
        for partition, changes in self.written.items():
            for view_key, held in changes:
                if held is None:
                    self.model[partition].pop(view_key, None)
                else:
                    self.model[partition][view_key] = held
        self.history[self.batches] = self.copy()
        for follower in self.open:
            if not follower.lazy:
                self.read(follower, just_committed=True)

    # -- subscribers -----------------------------------------------------------------------

    @rule(target=followers, keys=FILTERS, lazy=st.booleans())
    def subscribe(self, keys: dict[str, str], lazy: bool) -> Follower:
        follower = Follower(keys, self.app.subscribe("s", max_pending=3, **keys), lazy=lazy)
        self.open.append(follower)
        self.read(follower)
        assert set(follower.views) == set(follower.subscription.partitions)
        return follower

    @rule(follower=followers)
    def catch_up(self, follower: Follower) -> None:
        if follower in self.open:
            self.read(follower)

    @rule(follower=consumes(followers), data=st.data())
    def resume(self, follower: Follower, data: st.DataObject) -> None:
        """Close a subscriber and resume from one of the cursors it was given, with the
        view it had then: it replays or starts over, and ends up at the store."""
        if follower in self.open:
            self.open.remove(follower)
            follower.subscription.close()
        if not follower.saved:
            return
        cursor, views = data.draw(st.sampled_from(follower.saved))
        resumed = Follower(
            follower.keys,
            self.app.subscribe("s", from_cursor=cursor, max_pending=3, **follower.keys),
            views={p: dict(view) for p, view in views.items()},
            lazy=follower.lazy,
        )
        self.open.append(resumed)
        self.read(resumed)

    def read(self, follower: Follower, just_committed: bool = False) -> None:
        """Read what is ready, checking the view after every batch."""
        got: list[ChangeBatch] = []
        while True:
            try:
                batch = follower.subscription.poll()
            except SubscriptionLaggedError as lagged:
                # Fell behind: resume where it got to; the view it holds is that cursor's.
                cursor_matches = lagged.cursor == follower.subscription.cursor
                assert cursor_matches
                follower.subscription = self.app.subscribe(
                    "s", from_cursor=lagged.cursor, max_pending=3, **follower.keys
                )
                continue
            if batch is None:
                break
            got.append(batch)
            self.apply(follower, batch)
        if just_committed:  # one whole batch per partition it changed, in write order
            replayed = [batch for batch in got if not batch.snapshot]
            expected = {
                partition: [
                    (view_key, held)
                    for view_key, held in changes
                    if matches(follower.keys, view_key[0])
                ]
                for partition, changes in self.written.items()
                if partition in follower.subscription.partitions
            }
            expected = {p: changes for p, changes in expected.items() if changes}
            assert {batch.partition for batch in replayed} == set(expected)
            for batch in replayed:
                assert [
                    ((c.key, c.window), None if c.value is None else (c.value, c.timestamp))
                    for c in batch.changes
                ] == expected[batch.partition]

    def apply(self, follower: Follower, batch: ChangeBatch) -> None:
        view = follower.views.setdefault(batch.partition, {})
        if batch.snapshot:
            view.clear()
        for change in batch.changes:
            slot = (change.key, change.window)
            if change.value is None:  # a versioned snapshot holds deleted keys' tombstones
                assert not batch.snapshot or self.store_type.name == "versioned_key_value"
                view.pop(slot, None)
            else:
                view[slot] = (change.value, change.timestamp)
        at = batch.position.partition_offsets("source").get(0, 0)
        assert view == self.expected(follower.keys, batch.partition, self.history[at])
        if batch.snapshot:  # a snapshot is taken at the store's current position
            assert batch.position == self.position
        follower.saved.append((batch.cursor, {p: dict(v) for p, v in follower.views.items()}))
        del follower.saved[:-6]

    def expected(
        self, keys: dict[str, str], partition: int, store: dict[int, dict[Slot, Held]] | None = None
    ) -> dict[Slot, Held]:
        held = (self.model if store is None else store)[partition]
        return {slot: value for slot, value in held.items() if matches(keys, slot[0])}

    @invariant()
    def eager_subscribers_are_at_the_store(self) -> None:
        for follower in self.open:
            if not follower.lazy:
                for partition, view in follower.views.items():
                    assert view == self.expected(follower.keys, partition)


CASES = [(kind, engine) for kind in TYPES for engine in ("memory", "rocksdb")]


@pytest.mark.parametrize(
    ("store_type", "engine"), CASES, ids=[f"{kind.name}-{engine}" for kind, engine in CASES]
)
def test_views_follow_the_store(store_type: StoreType, engine: str) -> None:
    machine = type(
        f"Machine_{store_type.name}_{engine}",
        (SubscriptionMachine,),
        {"store_type": store_type, "engine": engine},
    )
    run_state_machine_as_test(
        machine, settings=settings(max_examples=30, stateful_step_count=30, deadline=None)
    )
