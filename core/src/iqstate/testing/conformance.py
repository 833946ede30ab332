"""`StoreConformance`: the tests every engine must pass, as a class to subclass.

    class TestMyEngine(StoreConformance):
        persistent = True
        manages_offsets = True
        window = True

        @pytest.fixture
        def store_factory(self):
            return StoreFactory.for_engine(MY_ENGINE)

Persistent engines should also override `simulate_crash` to abandon a store the way a
killed process would (no clean-close marker, nothing flushed). A store that claims
`atomic_commits` is also written by a separate process that is SIGKILLed at random moments
(`IQSTATE_CRASH_ITERATIONS` times, default 3), so its `store_factory` must be picklable
(module-level classes or functions, as `StoreFactory.for_engine` gives).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import random
import signal
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from iqstate.dispatch import QueryHandlerRegistry
from iqstate.errors import ClosedStoreError, IqstateError
from iqstate.iterators import KeyValueIterator
from iqstate.layered_store import KeySpaceStore
from iqstate.plugins import default_registry
from iqstate.position import Position, PositionBound, TopicPartition
from iqstate.queries import (
    KeyQuery,
    LimitedRangeQuery,
    MultiVersionedKeyQuery,
    Query,
    RangeQuery,
    VersionedRangeQuery,
    VersionedRecord,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.results import FailureReason, QueryResult
from iqstate.store import (
    KeyValueStore,
    QueryConfig,
    SessionStore,
    StateStore,
    VersionedKeyValueStore,
    WindowStore,
)
from iqstate.testing.factory import StoreFactory, make_context
from iqstate.testing.state_machine import StoreStateMachine
from iqstate.testing.type_machines import SessionStoreMachine, VersionedStoreMachine
from iqstate.times import MIN_MS

CHANGELOG = "conformance-changelog"
WINDOW_SIZE_MS = 1_000
RETENTION_MS = 10_000
HISTORY_RETENTION_MS = 1_000_000


def settle(store: KeyValueStore[bytes, bytes], committed: bool) -> None:
    """Commit the store's writes when a test reads them `committed`."""
    if committed:
        store.commit({})


class UnknownToEveryStore(Query[int]):
    """A query type no handler is registered for."""

    __slots__ = ()


@pytest.mark.iqstate_conformance
class StoreConformance:
    """Behaviour every engine's stores must show; subclass and provide `store_factory`."""

    persistent: ClassVar[bool] = False
    manages_offsets: ClassVar[bool] = False
    window: ClassVar[bool] = False
    state_machine_examples: ClassVar[int] = 60
    state_machine_steps: ClassVar[int] = 40

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        raise NotImplementedError("a StoreConformance subclass must provide store_factory")

    @pytest.fixture
    def query_handlers(self) -> QueryHandlerRegistry | None:
        """Handlers the stores dispatch with; `None` means those of the installed plugins."""
        return None

    @pytest.fixture
    def store_config(self) -> Mapping[str, Any]:
        """The engine's options (the context's `config`) every store of the suite opens
        with; override or parametrize it to check the engine under the options users set."""
        return {}

    @pytest.fixture(params=[False, True], ids=["nosync", "sync"])
    def sync_commits(self, request: pytest.FixtureRequest) -> bool:
        """Whether commits must be durable when they return: the runtime asks for it under
        exactly-once when a store has no changelog, so stores must behave alike both ways."""
        return bool(request.param)

    @pytest.fixture
    def context_options(
        self,
        store_config: Mapping[str, Any],
        sync_commits: bool,
        query_handlers: QueryHandlerRegistry | None,
    ) -> dict[str, Any]:
        """What every context of a test is made with, besides its place."""
        return {
            "config": store_config,
            "sync_commits": sync_commits,
            "query_handlers": query_handlers,
        }

    def simulate_crash(self, store: StateStore) -> None:
        """Abandon `store` as a killed process would; the default closes without commit."""
        store.close()

    # -- helpers ----------------------------------------------------------------------

    @pytest.fixture
    def open_kv(
        self, store_factory: StoreFactory, tmp_path: Path, context_options: dict[str, Any]
    ) -> Iterator[Callable[..., KeyValueStore[bytes, bytes]]]:
        opened: list[StateStore] = []

        def open_store(
            name: str = "kv", partition: int = 0, **context: Any
        ) -> KeyValueStore[bytes, bytes]:
            store = store_factory.key_value(name)
            store.init(make_context(tmp_path, name, partition, **{**context_options, **context}))
            opened.append(store)
            return store

        yield open_store
        for store in opened:
            if store.is_open:
                store.close()

    @pytest.fixture
    def kv(
        self, open_kv: Callable[..., KeyValueStore[bytes, bytes]]
    ) -> KeyValueStore[bytes, bytes]:
        return open_kv()

    @pytest.fixture
    def open_window(
        self, store_factory: StoreFactory, tmp_path: Path, context_options: dict[str, Any]
    ) -> Iterator[Callable[..., WindowStore[bytes, bytes]]]:
        if not self.window:
            pytest.skip(
                "window = False, though the engine provides window stores: set window = True "
                "on the test class to check them"
                if store_factory.window is not None
                else "store does not provide window stores"
            )
        if store_factory.window is None:
            pytest.fail("window = True but store_factory has no window factory")
        window_factory = store_factory.window
        opened: list[StateStore] = []

        def open_store(name: str = "win", partition: int = 0) -> WindowStore[bytes, bytes]:
            store = window_factory(name, WINDOW_SIZE_MS, RETENTION_MS)
            store.init(make_context(tmp_path, name, partition, **context_options))
            opened.append(store)
            return store

        yield open_store
        for store in opened:
            if store.is_open:
                store.close()

    @pytest.fixture
    def open_versioned(
        self, store_factory: StoreFactory, tmp_path: Path, context_options: dict[str, Any]
    ) -> Iterator[Callable[..., VersionedKeyValueStore[bytes, bytes]]]:
        if store_factory.versioned is None:
            pytest.skip("store_factory has no versioned stores")
        factory = store_factory.versioned
        opened: list[StateStore] = []

        def open_store(
            retention: int = HISTORY_RETENTION_MS, name: str = "ver", **context: Any
        ) -> VersionedKeyValueStore[bytes, bytes]:
            store = factory(name, retention)
            store.init(make_context(tmp_path, name, **{**context_options, **context}))
            opened.append(store)
            return store

        yield open_store
        for store in opened:
            if store.is_open:
                store.close()

    @pytest.fixture
    def open_session(
        self, store_factory: StoreFactory, tmp_path: Path, context_options: dict[str, Any]
    ) -> Iterator[Callable[..., SessionStore[bytes, bytes]]]:
        if store_factory.session is None:
            pytest.skip("store_factory has no session stores")
        factory = store_factory.session
        opened: list[StateStore] = []

        def open_store(
            name: str = "ses", retention: int = RETENTION_MS
        ) -> SessionStore[bytes, bytes]:
            store = factory(name, retention)
            store.init(make_context(tmp_path, name, **context_options))
            opened.append(store)
            return store

        yield open_store
        for store in opened:
            if store.is_open:
                store.close()

    # -- key-value data operations ------------------------------------------------------

    @pytest.fixture(params=[False, True], ids=["uncommitted", "committed"])
    def committed(self, request: pytest.FixtureRequest) -> bool:
        """Whether a test commits its writes before reading: a persistent store answers
        uncommitted writes from its overlay, committed ones from the engine (its `_read`
        and `_scan`), and both must give the same answers."""
        return bool(request.param)

    def test_put_get_delete(self, kv: KeyValueStore[bytes, bytes], committed: bool) -> None:
        assert kv.get(b"k") is None
        kv.put(b"k", b"v1")
        settle(kv, committed)
        assert kv.get(b"k") == b"v1"
        kv.put(b"k", b"v2")
        settle(kv, committed)
        assert kv.get(b"k") == b"v2"
        assert kv.delete(b"k") == b"v2"
        settle(kv, committed)
        assert kv.get(b"k") is None
        assert kv.delete(b"k") is None

    def test_put_none_deletes(self, kv: KeyValueStore[bytes, bytes], committed: bool) -> None:
        kv.put(b"k", b"v")
        settle(kv, committed)
        kv.put(b"k", None)
        settle(kv, committed)
        assert kv.get(b"k") is None
        assert list(kv.all()) == []

    def test_empty_value_is_a_value(self, kv: KeyValueStore[bytes, bytes], committed: bool) -> None:
        kv.put(b"k", b"")
        settle(kv, committed)
        assert kv.get(b"k") == b""
        assert list(kv.all()) == [(b"k", b"")]

    def test_put_all_applies_in_order(
        self, kv: KeyValueStore[bytes, bytes], committed: bool
    ) -> None:
        kv.put_all([(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"b", None), (b"c", b"4")])
        settle(kv, committed)
        assert list(kv.all()) == [(b"a", b"3"), (b"c", b"4")]

    def test_range_bounds_are_inclusive_and_ordered(
        self, kv: KeyValueStore[bytes, bytes], committed: bool
    ) -> None:
        data = {bytes([i]): bytes([i, i]) for i in (0, 1, 5, 9, 200, 255)}
        kv.put_all(list(data.items()))
        settle(kv, committed)
        ordered = sorted(data.items())
        assert list(kv.range(b"\x01", b"\x09")) == [
            p for p in ordered if b"\x01" <= p[0] <= b"\x09"
        ]
        assert list(kv.range(None, b"\x05")) == [p for p in ordered if p[0] <= b"\x05"]
        assert list(kv.range(b"\x05", None)) == [p for p in ordered if p[0] >= b"\x05"]
        assert list(kv.range(None, None)) == ordered
        assert list(kv.reverse_range(b"\x01", b"\x09")) == list(
            reversed([p for p in ordered if b"\x01" <= p[0] <= b"\x09"])
        )
        assert list(kv.reverse_all()) == list(reversed(ordered))
        assert list(kv.range(b"\x09", b"\x01")) == [], "lower > upper is an empty range"

    def test_limited_range_is_the_range_cut_short(self, kv: KeyValueStore[bytes, bytes]) -> None:
        """`limited_range` and `LimitedRangeQuery` give the first pairs of the range, in
        its order, before and after a commit (uncommitted writes merged in, or not)."""
        data = {bytes([i]): bytes([i, i]) for i in (0, 1, 5, 9, 200, 255)}
        kv.put_all(list(data.items()))
        ordered = sorted(data.items())
        bounds = (None, b"\x01", b"\x05", b"\x06", b"\xff")
        for committed in (False, True):
            if committed:
                kv.commit({})
            for lower, upper, limit, reverse in itertools.product(
                bounds, bounds, (1, 2, 3, 100), (False, True)
            ):
                inside = [
                    p
                    for p in ordered
                    if (lower is None or p[0] >= lower) and (upper is None or p[0] <= upper)
                ]
                expected = (inside[::-1] if reverse else inside)[:limit]
                assert list(kv.limited_range(lower, upper, limit, reverse)) == expected
                answer: QueryResult[KeyValueIterator[bytes, bytes]] = kv.query(
                    LimitedRangeQuery(lower, upper, reverse, limit)
                )
                assert answer.is_success and list(answer.result) == expected

    def test_keys_order_by_bytes(self, kv: KeyValueStore[bytes, bytes], committed: bool) -> None:
        keys = [b"b", b"a", b"ab", b"\x00", b"\xff", b"a\x00", b""]
        kv.put_all([(k, k) for k in keys if k])
        settle(kv, committed)
        assert [k for k, _ in kv.all()] == sorted(k for k in keys if k)

    def test_prefix_scan(self, kv: KeyValueStore[bytes, bytes], committed: bool) -> None:
        keys = [b"a", b"ab", b"abc", b"abd", b"ac", b"b", b"\xff", b"\xff\xff", b"\xff\x00"]
        kv.put_all([(k, b"v") for k in keys])
        settle(kv, committed)
        assert [k for k, _ in kv.prefix_scan(b"ab")] == [b"ab", b"abc", b"abd"]
        assert [k for k, _ in kv.prefix_scan(b"\xff")] == [b"\xff", b"\xff\x00", b"\xff\xff"]
        assert list(kv.prefix_scan(b"zz")) == []

    def test_iterators_are_snapshots_and_closeable(
        self, kv: KeyValueStore[bytes, bytes], committed: bool
    ) -> None:
        kv.put_all([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
        settle(kv, committed)
        iterator = kv.range(None, None)
        assert next(iterator) == (b"a", b"1")
        kv.put(b"b", b"changed")
        kv.delete(b"c")
        kv.put(b"d", b"4")
        settle(kv, committed)  # a commit after the iterator was made changes nothing in it
        assert list(iterator) == [(b"b", b"2"), (b"c", b"3")], "an iterator is a snapshot"
        with kv.all() as scoped:
            assert scoped.peek_next_key() == b"a"
        assert scoped.closed
        with pytest.raises(ValueError, match="closed"):
            next(scoped)

    def test_approximate_num_entries(self, kv: KeyValueStore[bytes, bytes]) -> None:
        assert kv.approximate_num_entries() == 0
        kv.put_all([(bytes([i]), b"v") for i in range(50)])
        assert 25 <= kv.approximate_num_entries() <= 100

    def test_closed_store_refuses_use(self, open_kv: Callable[..., Any]) -> None:
        store = open_kv()
        assert store.is_open
        store.close()
        assert not store.is_open
        with pytest.raises(IqstateError):
            store.put(b"k", b"v")
        with pytest.raises(ClosedStoreError):
            store.get(b"k")

    # -- queries ----------------------------------------------------------------------

    def test_key_and_range_queries(self, kv: KeyValueStore[bytes, bytes]) -> None:
        kv.update_position(Position.from_map({"in": {0: 7}}))
        kv.put_all([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
        found: QueryResult[bytes | None] = kv.query(KeyQuery.with_key(b"b"))
        assert found.is_success and found.result == b"2"
        assert found.position == Position.from_map({"in": {0: 7}})
        missing = kv.query(KeyQuery.with_key(b"zz"))
        assert missing.is_success and missing.result is None
        ascending: QueryResult[KeyValueIterator[bytes, bytes]] = kv.query(
            RangeQuery.with_range(b"a", b"b")
        )
        assert list(ascending.result) == [(b"a", b"1"), (b"b", b"2")]
        from_b: RangeQuery[bytes, bytes] = RangeQuery.with_lower_bound(b"b")
        descending = kv.query(from_b.with_descending_keys())
        assert list(descending.result) == [(b"c", b"3"), (b"b", b"2")]

    def test_unknown_query_type_fails_with_position(self, kv: KeyValueStore[bytes, bytes]) -> None:
        kv.update_position(Position.from_map({"in": {0: 3}}))
        result = kv.query(UnknownToEveryStore())
        assert result.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
        assert kv.name in result.failure_message and "UnknownToEveryStore" in result.failure_message
        assert result.position == Position.from_map({"in": {0: 3}})

    def test_position_bound(self, kv: KeyValueStore[bytes, bytes]) -> None:
        kv.put(b"k", b"v")
        kv.update_position(Position.from_map({"in": {0: 5, 1: 2}}))
        reached = PositionBound.at(Position.from_map({"in": {0: 5}}))
        assert kv.query(KeyQuery.with_key(b"k"), reached).result == b"v"
        ahead = PositionBound.at(Position.from_map({"in": {0: 6}}))
        result = kv.query(KeyQuery.with_key(b"k"), ahead)
        assert result.failure_reason is FailureReason.NOT_UP_TO_BOUND
        assert result.position == kv.position
        other_topic = PositionBound.at(Position.from_map({"elsewhere": {0: 0}}))
        assert kv.query(KeyQuery.with_key(b"k"), other_topic).is_failure

    def test_store_exception_becomes_a_failure(
        self, open_kv: Callable[..., Any], query_handlers: QueryHandlerRegistry | None
    ) -> None:
        def explode(store: Any, query: Any, bound: Any, config: Any) -> QueryResult[int]:
            raise RuntimeError("disk on fire")

        registry = (query_handlers or default_registry().query_handlers).copy()
        registry.register(UnknownToEveryStore, open_kv("probe").kind, explode, plugin="test")
        store = open_kv("exploding", query_handlers=registry)
        result = store.query(UnknownToEveryStore())
        assert result.failure_reason is FailureReason.STORE_EXCEPTION
        assert "RuntimeError" in result.failure_message and "disk on fire" in result.failure_message
        assert result.position == store.position

    def test_execution_info(self, kv: KeyValueStore[bytes, bytes]) -> None:
        plain = kv.query(KeyQuery.with_key(b"k"))
        assert plain.execution_info == []
        info = kv.query(KeyQuery.with_key(b"k"), config=QueryConfig.WITH_EXECUTION_INFO)
        assert len(info.execution_info) == 1
        assert kv.kind in info.execution_info[0] and "ns" in info.execution_info[0]

    # -- positions, commits, offsets -----------------------------------------------------

    def test_position_is_monotonic(self, kv: KeyValueStore[bytes, bytes]) -> None:
        assert kv.position == Position.empty()
        kv.update_position(Position.from_map({"in": {0: 5}}))
        kv.update_position(Position.from_map({"in": {0: 3, 1: 1}}))
        assert kv.position == Position.from_map({"in": {0: 5, 1: 1}})

    def test_flush_is_a_deprecated_noop(self, kv: KeyValueStore[bytes, bytes]) -> None:
        kv.put(b"k", b"v")
        with pytest.warns(DeprecationWarning, match="commit"):
            kv.flush()
        assert kv.get(b"k") == b"v"

    def test_committed_offsets(self, kv: KeyValueStore[bytes, bytes]) -> None:
        tp0, tp1 = TopicPartition(CHANGELOG, 0), TopicPartition(CHANGELOG, 1)
        kv.commit({tp0: 10, tp1: 20})
        if not self.manages_offsets:
            assert not kv.manages_offsets
            assert kv.committed_offset(tp0) is None
            return
        assert kv.manages_offsets
        assert (kv.committed_offset(tp0), kv.committed_offset(tp1)) == (10, 20)
        kv.commit({tp0: 11})
        assert (kv.committed_offset(tp0), kv.committed_offset(tp1)) == (11, 20)
        kv.commit({tp1: None})
        assert (kv.committed_offset(tp0), kv.committed_offset(tp1)) == (11, None)
        kv.commit({})
        assert kv.committed_offset(tp0) is None

    def test_commit_rejects_malformed_offsets(self, kv: KeyValueStore[bytes, bytes]) -> None:
        with pytest.raises(TypeError, match="TopicPartition"):
            kv.commit({"topic-0": 1})  # type: ignore[dict-item]
        with pytest.raises(TypeError, match="offset"):
            kv.commit({TopicPartition(CHANGELOG, 0): "12"})  # type: ignore[dict-item]

    def test_reopen(self, open_kv: Callable[..., KeyValueStore[bytes, bytes]]) -> None:
        store = open_kv()
        tp = TopicPartition(CHANGELOG, 0)
        store.update_position(Position.from_map({"in": {0: 4}}))
        store.put_all([(b"a", b"1"), (b"b", b"2")])
        store.commit({tp: 41})
        store.put(b"c", b"uncommitted")
        store.close()
        reopened = open_kv()
        if not self.persistent:
            assert list(reopened.all()) == [], "a non-persistent store reopens empty"
            assert reopened.position == Position.empty()
            return
        assert list(reopened.all()) == [(b"a", b"1"), (b"b", b"2")]
        if self.manages_offsets:
            assert reopened.committed_offset(tp) == 41
            assert reopened.position == Position.from_map({"in": {0: 4}})

    def test_crash_loses_exactly_the_uncommitted_writes(
        self, open_kv: Callable[..., KeyValueStore[bytes, bytes]]
    ) -> None:
        if not self.persistent:
            pytest.skip("only persistent stores survive a crash")
        store = open_kv()
        tp = TopicPartition(CHANGELOG, 0)
        store.update_position(Position.from_map({"in": {0: 1}}))
        store.put(b"a", b"committed")
        store.commit({tp: 1})
        store.update_position(Position.from_map({"in": {0: 2}}))
        store.put(b"a", b"lost")
        store.put(b"b", b"lost")
        self.simulate_crash(store)
        guarantee = "exactly_once" if store.atomic_commits else "at_least_once"
        reopened = open_kv(processing_guarantee=guarantee)
        assert list(reopened.all()) == [(b"a", b"committed")]
        if self.manages_offsets:
            assert reopened.committed_offset(tp) == 1
            assert reopened.position == Position.from_map({"in": {0: 1}})

    def test_sigkill_keeps_the_last_commit(
        self,
        store_factory: StoreFactory,
        open_kv: Callable[..., KeyValueStore[bytes, bytes]],
        tmp_path: Path,
        context_options: dict[str, Any],
    ) -> None:
        """A store claiming atomic commits, its writer SIGKILLed at random moments, reopens
        under exactly-once with data, offsets and position of its last commit."""
        if not store_factory.key_value("probe").atomic_commits:
            pytest.skip("the store does not claim atomic commits")
        spawn = multiprocessing.get_context("spawn")
        rng = random.Random(type(self).__name__)
        tp = TopicPartition(CHANGELOG, 0)
        last = 0
        for _ in range(crash_iterations()):
            writer = _Writer(store_factory, tmp_path, context_options)
            reported = _run_writer_until_killed(spawn, writer, last + 1, rng)
            store = open_kv("crash")
            values = {value for _, value in store.all()}
            assert len(values) == 1, f"a mix of commits after SIGKILL: {sorted(values)[:5]}"
            committed = int(values.pop())
            assert committed >= reported, "a commit that returned was lost"
            assert len(list(store.all())) == CRASH_KEYS
            if self.manages_offsets:
                assert store.committed_offset(tp) == committed
                assert store.position == Position.from_map({"src": {0: committed}})
            store.close()
            last = committed

    @pytest.mark.parametrize("store_type", ["versioned", "session"])
    def test_sigkill_keeps_the_last_commit_of_every_store_type(
        self,
        store_type: str,
        store_factory: StoreFactory,
        open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]],
        open_session: Callable[..., SessionStore[bytes, bytes]],
        tmp_path: Path,
        context_options: dict[str, Any],
    ) -> None:
        """The same for versioned and session stores: after each SIGKILL every key holds
        exactly the versions (sessions) of the batches committed, the last one included."""
        if not store_factory.key_value("probe").atomic_commits:
            pytest.skip("the store does not claim atomic commits")
        spawn = multiprocessing.get_context("spawn")
        rng = random.Random(f"{type(self).__name__}-{store_type}")
        last = 0
        for _ in range(crash_iterations()):
            writer = _Writer(store_factory, tmp_path, context_options, store_type)
            reported = _run_writer_until_killed(spawn, writer, last + 1, rng)
            batches: set[tuple[int, ...]] = set()
            if store_type == "versioned":
                store: StateStore = open_versioned(1 << 40, "crash")
                assert isinstance(store, VersionedKeyValueStore)
                for i in range(CRASH_KEYS):
                    versions = store.versions(b"key-%05d" % i, None, None, True)
                    batches.add(tuple(record.timestamp for record in versions))
            else:
                store = open_session("crash", 1 << 40)
                assert isinstance(store, SessionStore)
                with store.fetch_sessions(None, MIN_MS, 1 << 60) as sessions:
                    by_key: dict[bytes, list[int]] = {}
                    for session, _ in sessions:
                        by_key.setdefault(session.key, []).append(session.start_ms // 10)
                assert len(by_key) == CRASH_KEYS
                batches = {tuple(numbers) for numbers in by_key.values()}
            assert len(batches) == 1, f"keys at different commits after SIGKILL: {batches}"
            (numbers,) = batches
            committed = numbers[-1]
            assert numbers == tuple(range(1, committed + 1)), "a batch lost or half-applied"
            assert committed >= reported, "a commit that returned was lost"
            if self.manages_offsets:
                assert store.committed_offset(TopicPartition(CHANGELOG, 0)) == committed
            store.close()
            last = committed

    # -- window stores --------------------------------------------------------------------

    def test_window_put_fetch(self, open_window: Callable[..., WindowStore[bytes, bytes]]) -> None:
        store = open_window()
        assert store.window_size_ms == WINDOW_SIZE_MS and store.retention_ms == RETENTION_MS
        store.put(b"k", b"v0", 0)
        store.put(b"k", b"v1", 1_000)
        store.put(b"k", b"v2", 2_000)
        store.put(b"j", b"w1", 1_000)
        assert list(store.fetch(b"k", 1_000, 2_000)) == [(1_000, b"v1"), (2_000, b"v2")]
        assert list(store.fetch(b"k", 500, 999)) == []
        store.put(b"k", None, 1_000)
        assert list(store.fetch(b"k", 0, 5_000)) == [(0, b"v0"), (2_000, b"v2")]
        assert list(store.fetch_all(0, 1_000)) == [
            (Windowed(b"j", 1_000, 2_000), b"w1"),
            (Windowed(b"k", 0, 1_000), b"v0"),
        ]

    def test_window_retention_drops_expired(
        self, open_window: Callable[..., WindowStore[bytes, bytes]]
    ) -> None:
        store = open_window()
        store.put(b"k", b"old", 0)
        store.put(b"k", b"new", RETENTION_MS + 5_000)
        assert list(store.fetch(b"k", 0, 10 * RETENTION_MS)) == [(RETENTION_MS + 5_000, b"new")]
        assert not store.keeps(1_000), "keeps says which puts the store drops"
        assert store.keeps(5_001) and not store.keeps(5_000)  # the limit is itself expired
        store.put(b"k", b"late", 1_000)
        assert list(store.fetch(b"k", 0, 2_000)) == [], "a window already expired is not stored"

    def test_window_expired_by_names_what_a_put_drops(
        self, open_window: Callable[..., WindowStore[bytes, bytes]]
    ) -> None:
        store = open_window()
        for key, start in ((b"k", 0), (b"j", 1_000), (b"k", 2_000), (b"k", 9_000)):
            store.put(key, b"v", start)
        assert store.expired_by(9_000) == [], "a put that does not move stream time drops none"
        at = 2_000 + RETENTION_MS  # drops starts at or before 2,000
        assert sorted(store.expired_by(at)) == [(b"j", 1_000), (b"k", 0), (b"k", 2_000)]
        store.put(b"x", b"v", at)
        with store.all() as windows:
            assert [(w.key, w.start_ms) for w, _ in windows] == [(b"k", 9_000), (b"x", at)]
        assert store.expired_by(at) == [], "what was dropped is not named again"

    def test_window_queries(self, open_window: Callable[..., WindowStore[bytes, bytes]]) -> None:
        store = open_window()
        store.update_position(Position.from_map({"in": {0: 9}}))
        store.put(b"k", b"v1", 1_000)
        store.put(b"z", b"v2", 3_000)
        by_key: QueryResult[KeyValueIterator[int, bytes]] = store.query(
            WindowKeyQuery.with_key_and_window_start_range(b"k", 0, 5_000)
        )
        assert list(by_key.result) == [(1_000, b"v1")]
        assert by_key.position == Position.from_map({"in": {0: 9}})
        every: QueryResult[KeyValueIterator[Windowed[bytes], bytes]] = store.query(
            WindowRangeQuery.with_window_start_range(2_000, 3_000)
        )
        assert list(every.result) == [(Windowed(b"z", 3_000, 4_000), b"v2")]
        wrong = store.query(KeyQuery.with_key(b"k"))
        assert wrong.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE

    def test_window_reopen(self, open_window: Callable[..., WindowStore[bytes, bytes]]) -> None:
        store = open_window()
        store.update_position(Position.from_map({"in": {0: 3}}))
        store.put(b"k", b"v1", 1_000)
        store.put(b"k", b"v2", 2_000)
        store.commit({TopicPartition(CHANGELOG, 0): 7})
        store.put(b"k", b"lost", 3_000)
        store.close()
        reopened = open_window()
        if not self.persistent:
            assert list(reopened.all()) == []
            return
        assert list(reopened.fetch(b"k", 0, 9_000)) == [(1_000, b"v1"), (2_000, b"v2")]
        if self.manages_offsets:
            assert reopened.committed_offset(TopicPartition(CHANGELOG, 0)) == 7
            assert reopened.position == Position.from_map({"in": {0: 3}})
        reopened.put(b"k", b"late", 2_000 - RETENTION_MS)
        assert list(reopened.fetch(b"k", -RETENTION_MS, 0)) == [], "stream time survived reopen"

    def test_window_iterator_is_snapshot(
        self, open_window: Callable[..., WindowStore[bytes, bytes]]
    ) -> None:
        store = open_window()
        store.put(b"k", b"v1", 1_000)
        iterator: KeyValueIterator[int, bytes] = store.fetch(b"k", 0, 9_000)
        store.put(b"k", b"v2", 2_000)
        assert list(iterator) == [(1_000, b"v1")]

    # -- versioned stores ------------------------------------------------------------

    def test_versioned_versions_in_and_out_of_order(
        self, open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]]
    ) -> None:
        store = open_versioned()
        store.put(b"k", b"v10", 10)
        store.put(b"k", b"v30", 30)
        store.put(b"k", b"v20", 20)  # out of order: lands between the two
        assert store.get(b"k") == VersionedRecord(b"v30", 30, None)
        assert store.get(b"k", 25) == VersionedRecord(b"v20", 20, 30)
        assert store.get(b"k", 19) == VersionedRecord(b"v10", 10, 20)
        assert store.get(b"k", 9) is None, "nothing was valid before the first version"
        store.put(b"k", b"v20b", 20)  # the same timestamp replaces that version
        assert store.get(b"k", 20) == VersionedRecord(b"v20b", 20, 30)
        answer: QueryResult[Any] = store.query(MultiVersionedKeyQuery(b"k", 15, 25))
        with answer.result as versions:
            assert list(versions) == [
                VersionedRecord(b"v20b", 20, 30),
                VersionedRecord(b"v10", 10, 20),
            ], "valid at some instant of [15, 25], newest first"

    def test_versioned_tombstones(
        self, open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]]
    ) -> None:
        store = open_versioned()
        store.put(b"k", b"a", 10)
        store.put(b"k", None, 20)  # a tombstone version
        store.put(b"k", b"c", 30)
        assert store.get(b"k", 25) is None
        assert store.get(b"k", 15) == VersionedRecord(b"a", 10, 20)
        assert store.get(b"k") == VersionedRecord(b"c", 30, None)
        store.put(b"k", None, 40)
        assert store.get(b"k") is None
        assert store.query(KeyQuery(b"k")).result is None
        assert store.get(b"k", 35) == VersionedRecord(b"c", 30, 40)
        answer_versions: QueryResult[Any] = store.query(
            MultiVersionedKeyQuery(b"k", ascending=True)
        )
        with answer_versions.result as versions:
            assert [record.timestamp for record in versions] == [10, 30]

    def test_versioned_retention(
        self, open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]]
    ) -> None:
        store = open_versioned(retention=100)
        store.put(b"k", b"old", 0)
        store.put(b"k", b"mid", 50)
        store.put(b"other", b"x", 200)  # stream time 200: history kept from 100 on
        assert store.get(b"k", 49) is None, "an older version before the history kept"
        assert store.get(b"k", 99) == VersionedRecord(b"mid", 50, None), (
            "the current version is provable at any time after it started (Kafka's rule)"
        )
        assert store.get(b"k", 100) == VersionedRecord(b"mid", 50, None)
        assert store.keeps(100) and not store.keeps(99), "keeps says which puts are dropped"
        store.put(b"k", b"late", 99)  # older than the retention: dropped
        assert store.get(b"k") == VersionedRecord(b"mid", 50, None)
        store.put(b"k", b"new", 150)
        store.put(b"other", b"y", 300)  # stream time 300: mid (valid to 150) is gone
        answer_versions: QueryResult[Any] = store.query(MultiVersionedKeyQuery(b"k"))
        with answer_versions.result as versions:
            assert list(versions) == [VersionedRecord(b"new", 150, None)]

    def test_versioned_expired_by_names_what_a_put_drops(
        self, open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]]
    ) -> None:
        store = open_versioned(retention=100)
        store.put(b"k", b"a", 0)
        store.put(b"k", b"b", 50)
        store.put(b"k", b"c", 120)  # a: valid to 50; b: valid to 120
        store.put(b"gone", None, 30)  # a key whose current version is a tombstone
        store.put(b"kept", b"x", 25)  # a current version is kept however old
        store.put(b"edge", b"v", 90)
        store.put(b"edge", None, 100)  # deleted at what becomes the boundary
        assert store.expired_by(120) == [], "a put that does not move stream time drops none"
        # stream time 200: the history kept starts at 100; a (to 50) goes, b (to 120) stays;
        # edge goes whole, but a put at 100 is still kept: its tombstone version is not named
        assert sorted(store.expired_by(200)) == [(b"edge", 90), (b"gone", 30), (b"k", 0)]
        store.put(b"other", b"y", 200)
        store.put(b"edge", b"back", 100)
        assert store.holds_version(b"edge", 100) and store.get(b"edge") is not None
        assert [record.timestamp for record in store.versions(b"k", None, None, True)] == [
            50,
            120,
        ]
        assert store.get(b"gone", 150) is None and store.get(b"kept") is not None
        assert store.expired_by(200) == [], "what was dropped is not named again"
        assert sorted(store.expired_by(300)) == [(b"k", 50)]
        assert store.holds_version(b"k", 50) and store.holds_version(b"kept", 25)
        assert not store.holds_version(b"k", 0) and not store.holds_version(b"gone", 30)
        store.put(b"t", b"v", 150)
        store.put(b"t", None, 160)  # a tombstone version is held as well
        store.put(b"t", b"w", 170)
        assert store.holds_version(b"t", 160) and not store.holds_version(b"t", 165)
        # what a put may cut short; a store may leave out a tombstone among older versions
        # (the contract's default cannot see them), never another version
        assert store.held_timestamps(b"t") in ([150, 160, 170], [150, 170])
        assert store.held_timestamps(b"absent") == []

    def test_versioned_current_in_range(
        self, open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]]
    ) -> None:
        """Each key's current version by key, a deleted key's tombstone as `None` (a store
        may leave deleted keys out: the contract's default cannot see them)."""
        store = open_versioned()
        for key, value, timestamp in (
            (b"a", b"a1", 10), (b"a", b"a2", 20), (b"b", b"b1", 15), (b"b", None, 25),
            (b"c", b"c1", 30), (b"c", b"c0", 5),  # out of order: not the current version
        ):  # fmt: skip
            store.put(key, value, timestamp)
        everything = store.current_in_range(None, None)
        assert everything in (
            [(b"a", 20, b"a2"), (b"b", 25, None), (b"c", 30, b"c1")],
            [(b"a", 20, b"a2"), (b"c", 30, b"c1")],
        )
        assert [key for key, _, _ in store.current_in_range(b"b", b"c")] in ([b"b", b"c"], [b"c"])
        assert store.current_in_range(b"a", b"a") == [(b"a", 20, b"a2")]
        assert store.current_in_range(b"d", None) == []

    def test_versioned_retention_frees_space(
        self, open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]]
    ) -> None:
        """Versions wholly outside the retention leave the engine's store, in order or not."""
        store = open_versioned(retention=10)
        for timestamp in range(0, 400, 2):
            store.put(b"k", b"v", timestamp)
            store.put(b"k", b"w", timestamp - 1)  # out of order, between two versions
            store.put(b"gone", None if timestamp % 4 else b"x", timestamp)
        assert isinstance(store, KeySpaceStore)
        with store.key_value_store.range(None, None) as entries:
            assert len(list(entries)) < 40, "only the retained history may stay"
        assert store.get(b"k", 392) == VersionedRecord(b"v", 392, 393)

    def test_versioned_range_as_of(
        self, open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]]
    ) -> None:
        store = open_versioned()
        for key, value, timestamp in (
            (b"a", b"a1", 10), (b"a", b"a2", 20), (b"b", b"b1", 15), (b"c", b"c1", 30),
            (b"ab", b"ab1", 5), (b"b", None, 25),
        ):  # fmt: skip
            store.put(key, value, timestamp)
        answer_found: QueryResult[Any] = store.query(VersionedRangeQuery(b"a", b"b", 16))
        with answer_found.result as found:
            assert list(found) == [
                (b"a", VersionedRecord(b"a1", 10, 20)),
                (b"ab", VersionedRecord(b"ab1", 5, None)),
                (b"b", VersionedRecord(b"b1", 15, 25)),
            ]
        everything: QueryResult[Any] = store.query(VersionedRangeQuery())
        with everything.result as found:
            assert [key for key, _ in found] == [b"a", b"ab", b"c"], "b is deleted now"

    def test_versioned_reopen_and_crash(
        self, open_versioned: Callable[..., VersionedKeyValueStore[bytes, bytes]]
    ) -> None:
        if not self.persistent:
            pytest.skip("only persistent stores keep versions across a reopen")
        store = open_versioned()
        store.put(b"k", b"v1", 10)
        store.put(b"k", b"v3", 30)
        store.update_position(Position.from_map({"src": {0: 1}}))
        store.commit({TopicPartition(CHANGELOG, 0): 1})
        store.put(b"k", b"v2", 20)  # not committed
        assert isinstance(store, KeySpaceStore)
        self.simulate_crash(store.key_value_store)
        # A store without atomic commits must be rebuilt under exactly-once; under
        # at-least-once it is reopened as the crash left it, which is what is checked here.
        guarantee = "exactly_once" if store.atomic_commits else "at_least_once"
        reopened = open_versioned(processing_guarantee=guarantee)
        assert reopened.get(b"k", 25) == VersionedRecord(b"v1", 10, 30), "exactly the commit"
        assert reopened.committed_offset(TopicPartition(CHANGELOG, 0)) == 1
        reopened.put(b"k", b"v2", 20)
        reopened.commit({})
        reopened.close()
        again = open_versioned()
        assert again.get(b"k", 25) == VersionedRecord(b"v2", 20, 30)

    # -- session stores ---------------------------------------------------------------

    def test_sessions_by_key_and_start(
        self, open_session: Callable[..., SessionStore[bytes, bytes]]
    ) -> None:
        store = open_session()
        store.put(b"k", b"1", 100, 200)
        store.put(b"k", b"2", 300, 300)
        store.put(b"kk", b"3", 150, 160)  # a key the other starts: never mixed in
        answer: QueryResult[Any] = store.query(WindowRangeQuery.with_key(b"k"))
        with answer.result as sessions:
            assert list(sessions) == [
                (Windowed(b"k", 100, 200), b"1"),
                (Windowed(b"k", 300, 300), b"2"),
            ]
        store.put(b"k", None, 100, 200)  # merged away
        store.put(b"k", b"12", 100, 300)
        store.put(b"k", None, 300, 300)
        with store.fetch_sessions(b"k", 0, 1_000) as sessions:
            assert list(sessions) == [(Windowed(b"k", 100, 300), b"12")]
        answer_sessions: QueryResult[Any] = store.query(WindowRangeQuery(120, 200))
        with answer_sessions.result as sessions:
            assert list(sessions) == [(Windowed(b"kk", 150, 160), b"3")]

    def test_sessions_retention(
        self, open_session: Callable[..., SessionStore[bytes, bytes]]
    ) -> None:
        store = open_session()
        store.put(b"k", b"old", 0, 1_000)
        store.put(b"k", b"new", 10_500, 11_000)  # stream time 11,000: ends at <= 1,000 go
        assert not store.keeps(900), "keeps says which puts the store drops"
        assert store.keeps(11_000 - RETENTION_MS + 1) and not store.keeps(11_000 - RETENTION_MS)
        store.put(b"k", b"late", 500, 900)  # dropped as it arrives
        with store.fetch_sessions(None, MIN_MS, 1 << 40) as sessions:
            assert list(sessions) == [(Windowed(b"k", 10_500, 11_000), b"new")]
        with pytest.raises(ValueError, match="after its end"):
            store.put(b"k", b"x", 20, 10)

    def test_sessions_expired_by_names_what_a_put_drops(
        self, open_session: Callable[..., SessionStore[bytes, bytes]]
    ) -> None:
        store = open_session()
        store.put(b"k", b"1", 0, 5_000)  # starts first, ends last of the three
        store.put(b"j", b"2", 1_000, 1_500)
        store.put(b"k", b"3", 2_000, 2_000)
        at = 2_000 + RETENTION_MS  # drops ends at or before 2,000
        assert store.expired_by(2_000) == []
        assert sorted(store.expired_by(at)) == [(b"j", 1_000, 1_500), (b"k", 2_000, 2_000)]
        store.put(b"x", b"4", at, at)
        with store.fetch_sessions(None, MIN_MS, 1 << 40) as sessions:
            assert [(s.key, s.start_ms) for s, _ in sessions] == [(b"k", 0), (b"x", at)]
        assert store.expired_by(at) == []

    def test_sessions_reopen(self, open_session: Callable[..., SessionStore[bytes, bytes]]) -> None:
        if not self.persistent:
            pytest.skip("only persistent stores keep sessions across a reopen")
        store = open_session()
        store.put(b"k", b"1", 100, 200)
        store.commit({})
        store.put(b"k", b"2", 300, 400)  # not committed
        store.close()
        reopened = open_session()
        with reopened.fetch_sessions(b"k", MIN_MS, 1 << 40) as sessions:
            assert list(sessions) == [(Windowed(b"k", 100, 200), b"1")]

    # -- the model-based state machine --------------------------------------------------------

    @pytest.mark.iqstate_slow
    def test_state_machine(
        self,
        store_factory: StoreFactory,
        tmp_path: Path,
        query_handlers: QueryHandlerRegistry | None,
        store_config: Mapping[str, Any],
    ) -> None:
        machine = StoreStateMachine.bind(
            store_factory,
            persistent=self.persistent,
            manages_offsets=self.manages_offsets,
            crash=self.simulate_crash,
            root=tmp_path,
            query_handlers=query_handlers,
            config=store_config,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            run_state_machine_as_test(
                machine,
                settings=state_machine_settings(
                    self.state_machine_examples, self.state_machine_steps
                ),
            )

    @pytest.mark.iqstate_slow
    @pytest.mark.parametrize("machine", [VersionedStoreMachine, SessionStoreMachine])
    def test_store_type_state_machine(
        self,
        machine: type[VersionedStoreMachine] | type[SessionStoreMachine],
        store_factory: StoreFactory,
        tmp_path: Path,
        query_handlers: QueryHandlerRegistry | None,
        store_config: Mapping[str, Any],
    ) -> None:
        """Versions through out-of-order puts, tombstones and retention; sessions through
        merges and retention; both through commits, reopening and crashes."""
        bound = machine.bind(
            store_factory,
            persistent=self.persistent,
            crash=self.simulate_crash,
            root=tmp_path,
            query_handlers=query_handlers,
            config=store_config,
        )
        run_state_machine_as_test(
            bound,
            settings=state_machine_settings(self.state_machine_examples, self.state_machine_steps),
        )


def state_machine_settings(examples: int, steps: int) -> settings:
    """The state machines' settings: `examples` runs of up to `steps` steps, or more runs
    when the active hypothesis profile asks for more than the `default` profile does (as
    `--hypothesis-profile=long` does); the profile never shortens them."""
    active = settings().max_examples
    if active > settings.get_profile("default").max_examples:
        examples = max(examples, active)
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


CRASH_KEYS = 200


def crash_iterations() -> int:
    """SIGKILLs per store in the crash test: `IQSTATE_CRASH_ITERATIONS` (default 3)."""
    return int(os.environ.get("IQSTATE_CRASH_ITERATIONS", "3"))


class _Writer:
    """What the SIGKILLed writer process opens: its store type, where, and how."""

    def __init__(
        self,
        factory: StoreFactory,
        root: Path,
        context_options: dict[str, Any],
        store_type: str = "key_value",
    ) -> None:
        self.factory = factory
        self.root = root
        self.store_type = store_type
        # The handlers stay behind: the child loads its own, and a registry need not pickle.
        self.config = dict(context_options["config"])
        self.sync_commits: bool = context_options["sync_commits"]


def _commit_until_killed(writer: _Writer, first: int, progress: Any) -> None:
    """In a child process: commit numbered batches forever. Key-value: every key gets the
    number; versioned: every key a version at the number; session: every key a session
    `[10 * number, 10 * number + 5]`."""
    store: Any
    factory, store_type = writer.factory, writer.store_type
    if store_type == "versioned":
        assert factory.versioned is not None
        store = factory.versioned("crash", 1 << 40)
    elif store_type == "session":
        assert factory.session is not None
        store = factory.session("crash", 1 << 40)
    else:
        store = factory.key_value("crash")
    store.init(
        make_context(writer.root, "crash", config=writer.config, sync_commits=writer.sync_commits)
    )
    tp = TopicPartition(CHANGELOG, 0)
    for number in itertools.count(first):
        value = str(number).encode()
        keys = [b"key-%05d" % i for i in range(CRASH_KEYS)]
        if store_type == "versioned":
            store.put_all([(key, number, value) for key in keys])
        elif store_type == "session":
            store.put_all([(key, 10 * number, 10 * number + 5, value) for key in keys])
        else:
            store.put_all([(key, value) for key in keys])
        store.update_position(Position.from_map({"src": {0: number}}))
        store.commit({tp: number})
        progress.send(number)


def _run_writer_until_killed(spawn: Any, writer: _Writer, first: int, rng: random.Random) -> int:
    """Start a writer, let it commit a random number of times, SIGKILL it; the last number
    it reported as committed."""
    receiver, sender = spawn.Pipe(duplex=False)
    try:
        child = spawn.Process(
            target=_commit_until_killed,
            args=(writer, first, sender),
            daemon=True,
        )
        child.start()
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        pytest.fail(f"store_factory must be picklable for the SIGKILL test: {exc}")
    sender.close()
    try:
        if not receiver.poll(120):
            pytest.fail("the writer process committed nothing within 120 s")
        reported = int(receiver.recv())
        for _ in range(rng.randint(0, 20)):
            reported = int(receiver.recv())
        time.sleep(rng.random() * 0.02)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        receiver.close()
    return reported
