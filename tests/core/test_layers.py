"""The layer chain: metered serdes and metrics, the caching buffer, change-logging, dispatch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from iqstate import (
    FailureReason,
    InMemoryChangelog,
    KeyQuery,
    Position,
    PositionBound,
    Query,
    QueryConfig,
    QueryResult,
    RangeQuery,
    Serdes,
    SerializationError,
    StateStoreContext,
    TopicPartition,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.engines.memory import MemoryKeyValueStore, MemoryWindowStore
from iqstate.layers import (
    CachingKeyValueStore,
    MeteredKeyValueStore,
    build_key_value_chain,
    build_window_chain,
)
from iqstate.plugins import default_registry
from iqstate.testing import StoreFactory, StoreStateMachine

AT_5 = Position.from_map({"in": {0: 5}})


def context(**overrides: Any) -> StateStoreContext:
    values: dict[str, Any] = {"application_id": "app", "store_name": "s", "partition": 0}
    values.update(overrides)
    return StateStoreContext(**values)


def chain(
    caching: bool | int = False, logging: bool = False, **ctx: Any
) -> MeteredKeyValueStore[Any, Any]:
    store = build_key_value_chain(
        MemoryKeyValueStore("s"), Serdes.string(), Serdes.json(), caching=caching, logging=logging
    )
    store.init(context(**ctx))
    return store


# -- metered ----------------------------------------------------------------------------------


def test_metered_layer_types_keys_and_values() -> None:
    store = chain()
    store.put("a", {"n": 1})
    store.put_all([("b", [1, 2]), ("c", None)])
    assert store.get("a") == {"n": 1}
    assert store.innermost().get(b"a") == b'{"n":1}'  # type: ignore[attr-defined]
    assert list(store.range("a", "b")) == [("a", {"n": 1}), ("b", [1, 2])]
    assert list(store.reverse_all()) == [("b", [1, 2]), ("a", {"n": 1})]
    assert list(store.prefix_scan("a")) == [("a", {"n": 1})]
    assert store.delete("a") == {"n": 1}
    assert store.approximate_num_entries() == 1


def test_integer_keys_range_numerically() -> None:
    store = build_key_value_chain(MemoryKeyValueStore("n"), Serdes.int64(), Serdes.string())
    store.init(context(store_name="n"))
    store.put_all([(k, str(k)) for k in (-100, -3, 0, 2, 5, 10, 11, 300)])
    result = store.query(RangeQuery.with_range(2, 10))
    assert [k for k, _ in result.result] == [2, 5, 10]
    negatives = store.query(RangeQuery.with_upper_bound(-1).with_descending_keys())
    assert [k for k, _ in negatives.result] == [-3, -100]


def test_wrong_key_type_names_store_serde_and_type() -> None:
    store = chain()
    with pytest.raises(SerializationError) as error:
        store.put(42, "v")
    message = str(error.value)
    assert "store 's'" in message and "string" in message and "int" in message
    with pytest.raises(SerializationError, match=r"json.*set"):
        store.put("k", {1, 2})
    assert list(store.all()) == [], "a refused write changes nothing"
    failed = store.query(KeyQuery.with_key(42))
    assert failed.failure_reason is FailureReason.STORE_EXCEPTION
    assert "store 's'" in failed.failure_message and "int" in failed.failure_message
    assert failed.position == store.position


def test_corrupt_stored_value_is_a_store_exception() -> None:
    store = chain()
    store.innermost().put(b"k", b"{not json")  # type: ignore[attr-defined]
    result = store.query(KeyQuery.with_key("k"))
    assert result.failure_reason is FailureReason.STORE_EXCEPTION
    assert "decode" in result.failure_message


def test_string_ranges_decode_every_pair_and_stop_at_one_that_is_not_utf8() -> None:
    store = build_key_value_chain(MemoryKeyValueStore("t"), Serdes.string(), Serdes.string())
    store.init(context(store_name="t"))
    pairs = [(f"k{i:03d}", f"v\u00e9{i}") for i in range(50)]
    store.put_all(pairs)
    answer = store.query(RangeQuery.with_range("k010", "k019"))
    with answer.result as rows:
        assert list(rows) == pairs[10:20]
    store.innermost().put(b"k015", b"\xff\xfe")  # type: ignore[attr-defined]
    with store.query(RangeQuery.with_range("k010", "k019")).result as rows:
        assert [next(rows) for _ in range(5)] == pairs[10:15], "pairs before it are answered"
        with pytest.raises(SerializationError, match="string"):
            next(rows)


def test_metered_layer_records_latency_and_commit_metrics() -> None:
    store = chain()
    for i in range(5):
        store.put(str(i), i)
    store.get("1")
    store.commit({})
    metrics = store.metrics.snapshot()
    assert metrics["put-rate"] > 0 and metrics["put-latency-avg"] > 0
    assert metrics["put-latency-max"] >= metrics["put-latency-avg"]
    assert metrics["get-rate"] > 0
    assert {"commit-rate", "commit-latency-avg", "commit-latency-max"} <= metrics.keys()
    assert metrics["commit-latency-max"] > 0


def test_typed_queries_through_the_chain() -> None:
    store = chain()
    store.update_position(AT_5)
    store.put_all([("a", 1), ("b", 2), ("c", 3)])
    hit = store.query(KeyQuery.with_key("b"))
    assert hit.result == 2 and hit.position == AT_5
    assert store.query(KeyQuery.with_key("zz")).result is None
    ranged = store.query(RangeQuery.with_range("b", None).with_descending_keys())
    assert list(ranged.result) == [("c", 3), ("b", 2)] and ranged.position == AT_5


def test_window_chain_types_and_queries() -> None:
    store = build_window_chain(
        MemoryWindowStore("w", 60_000, 600_000), Serdes.string(), Serdes.int64()
    )
    store.init(context(store_name="w"))
    store.put("hello", 3, 0)
    store.put("hello", 5, 60_000)
    store.put_all([("world", 0, 1)])
    by_key = store.query(WindowKeyQuery.with_key_and_window_start_range("hello", 0, 60_000))
    assert list(by_key.result) == [(0, 3), (60_000, 5)]
    every = store.query(WindowRangeQuery.with_window_start_range(0, 0))
    assert list(every.result) == [
        (Windowed("hello", 0, 60_000), 3),
        (Windowed("world", 0, 60_000), 1),
    ]
    assert list(store.fetch("world", 0, 0)) == [(0, 1)]
    assert (
        store.query(KeyQuery.with_key("hello")).failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
    )


# -- dispatch ---------------------------------------------------------------------------------


class EchoQuery(Query[object]):
    """A query only a test handler on the memory engine knows."""

    __slots__ = ("payload",)

    def __init__(self, payload: object) -> None:
        object.__setattr__(self, "payload", payload)


def test_unknown_query_reaches_the_engine_untouched_through_every_layer() -> None:
    seen: list[object] = []

    def echo(store: Any, query: Any, bound: Any, config: Any) -> QueryResult[object]:
        seen.append(query)
        return QueryResult.for_result(query.payload)

    registry = default_registry().query_handlers.copy()
    registry.register(EchoQuery, MemoryKeyValueStore.kind, echo, plugin="test")
    store = chain(
        caching=True, logging=True, query_handlers=registry, changelog_writer=InMemoryChangelog()
    )
    query = EchoQuery(b"raw")
    result = store.query(query, config=QueryConfig.WITH_EXECUTION_INFO)
    assert seen == [query] and seen[0] is query, "every layer passed the very same object down"
    assert result.result == b"raw"
    layers = [entry.split(" store ")[0] for entry in result.execution_info]
    assert layers == [
        "memory.key_value",
        "logging.key_value",
        "caching.key_value",
        "metered.key_value",
    ], "innermost first"
    assert all(entry.endswith("ns") for entry in result.execution_info)

    without_handler = chain(caching=True)
    failed = without_handler.query(query, config=QueryConfig.WITH_EXECUTION_INFO)
    assert failed.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
    assert "memory.key_value store 's'" in failed.failure_message
    assert "EchoQuery" in failed.failure_message
    assert len(failed.execution_info) == 3 and failed.position == Position.empty()


def test_handler_tables_are_built_once_at_init() -> None:
    registry = default_registry().query_handlers.copy()
    store = chain(query_handlers=registry)
    registry.register(
        EchoQuery,
        MemoryKeyValueStore.kind,
        lambda *_: QueryResult.for_result("late"),
        plugin="late",
    )
    assert store.query(EchoQuery(1)).failure_reason is FailureReason.UNKNOWN_QUERY_TYPE


# -- caching ----------------------------------------------------------------------------------


def caching(max_entries: int = 100) -> CachingKeyValueStore:
    store = CachingKeyValueStore(MemoryKeyValueStore("c"), max_entries)
    store.init(context(store_name="c"))
    return store


def test_cache_buffers_until_commit_and_holds_the_position() -> None:
    store = caching()
    store.update_position(AT_5)
    store.put(b"a", b"1")
    beneath = store.wrapped
    assert beneath.get(b"a") is None and store.get(b"a") == b"1"
    assert beneath.position == Position.empty(), "the store beneath never runs ahead of its data"
    assert store.position == AT_5
    store.commit({})
    assert beneath.get(b"a") == b"1" and beneath.position == AT_5
    assert store.buffered_entries() == 0


def test_cache_flushes_when_full() -> None:
    store = caching(max_entries=3)
    store.update_position(AT_5)
    store.put_all([(b"a", b"1"), (b"b", b"2")])
    assert store.buffered_entries() == 2
    store.put(b"c", b"3")
    assert store.buffered_entries() == 0
    assert store.wrapped.get(b"c") == b"3" and store.wrapped.position == AT_5


def test_cache_answers_key_queries_unless_skipped() -> None:
    store = caching()
    store.wrapped.put(b"k", b"old")
    store.update_position(AT_5)
    store.put(b"k", b"new")
    cached = store.query(KeyQuery.with_key(b"k"), config=QueryConfig.WITH_EXECUTION_INFO)
    assert cached.result == b"new" and cached.position == AT_5
    assert len(cached.execution_info) == 1, "a cache hit never reaches the engine"
    skipped = store.query(KeyQuery.with_key(b"k").skip_cache())
    assert skipped.result == b"old" and skipped.position == Position.empty()
    store.delete(b"k")
    assert store.query(KeyQuery.with_key(b"k")).result is None, "a buffered delete hides the key"
    assert store.query(KeyQuery.with_key(b"k").skip_cache()).result == b"old"


def test_skip_cache_honours_the_bound_below_the_cache() -> None:
    store = caching()
    store.update_position(AT_5)
    store.put(b"k", b"v")
    bound = PositionBound.at(AT_5)
    assert store.query(KeyQuery.with_key(b"k"), bound).result == b"v"
    skipped = store.query(KeyQuery.with_key(b"k").skip_cache(), bound)
    assert skipped.failure_reason is FailureReason.NOT_UP_TO_BOUND


def test_skip_cache_survives_the_metered_layer() -> None:
    store = chain(caching=True)
    store.put("k", "buffered")
    assert store.query(KeyQuery.with_key("k")).result == "buffered"
    assert store.query(KeyQuery.with_key("k").skip_cache()).result is None


def test_cache_merges_buffer_into_ranges_with_deletes() -> None:
    store = caching()
    store.wrapped.put_all([(b"a", b"1"), (b"c", b"3"), (b"e", b"5")])
    store.put(b"b", b"2")
    store.put(b"c", b"33")
    store.delete(b"e")
    store.put(b"f", b"6")
    expected = [(b"a", b"1"), (b"b", b"2"), (b"c", b"33"), (b"f", b"6")]
    assert list(store.range(None, None)) == expected
    assert list(store.reverse_range(None, None)) == list(reversed(expected))
    assert list(store.range(b"b", b"e")) == expected[1:3]
    queried = store.query(RangeQuery.with_range(b"b", b"f").with_descending_keys())
    assert list(queried.result) == [(b"f", b"6"), (b"c", b"33"), (b"b", b"2")]
    assert list(store.prefix_scan(b"c")) == [(b"c", b"33")]


def test_cache_discards_its_buffer_on_close_without_commit() -> None:
    store = caching()
    store.put(b"k", b"v")
    store.close()
    assert store.buffered_entries() == 0


@pytest.mark.iqstate_slow
@pytest.mark.parametrize("max_entries", [1, 3, 1000])
def test_caching_layer_state_machine(tmp_path: Path, max_entries: int) -> None:
    """The caching layer over the memory engine behaves as a plain store, whatever its size."""
    factory = StoreFactory(
        key_value=lambda name: CachingKeyValueStore(MemoryKeyValueStore(name), max_entries)
    )
    machine = StoreStateMachine.bind(
        factory, persistent=False, manages_offsets=False, root=tmp_path
    )
    run_state_machine_as_test(machine, settings=settings(max_examples=40, deadline=None))


# -- change-logging ---------------------------------------------------------------------------


def test_change_logging_sends_every_write_with_the_position() -> None:
    changelog = InMemoryChangelog()
    store = chain(logging=True, changelog_writer=changelog)
    store.update_position(AT_5)
    store.put("a", 1)
    store.put_all([("b", 2), ("a", None)])
    store.update_position(Position.from_map({"in": {0: 6}}))
    store.delete("b")
    partition = TopicPartition("app-s-changelog", 0)
    records = changelog.records(partition)
    assert [(r.key, r.value) for r in records] == [
        (b"a", b"1"),
        (b"b", b"2"),
        (b"a", None),
        (b"b", None),
    ]
    assert [r.position for r in records] == [AT_5, AT_5, AT_5, Position.from_map({"in": {0: 6}})]
    assert changelog.flush() == {partition: 4}


def test_change_logging_below_the_cache_logs_at_flush() -> None:
    changelog = InMemoryChangelog()
    store = chain(caching=True, logging=True, changelog_writer=changelog)
    store.update_position(AT_5)
    store.put("a", 1)
    assert changelog.partitions() == [], "buffered writes are not logged yet"
    store.commit({})
    [partition] = changelog.partitions()
    assert [(r.key, r.position) for r in changelog.records(partition)] == [(b"a", AT_5)]


def test_change_logging_window_keys() -> None:
    changelog = InMemoryChangelog()
    store = build_window_chain(
        MemoryWindowStore("w", 10, 100), Serdes.string(), Serdes.int64(), logging=True
    )
    store.init(context(store_name="w", partition=2, changelog_writer=changelog))
    store.put("k", 7, 20)
    [record] = changelog.records(TopicPartition("app-w-changelog", 2))
    from iqstate.keyspace import decode_window_key

    assert decode_window_key(record.key) == (b"k", 20)


def test_logging_without_a_writer_is_a_clear_error() -> None:
    with pytest.raises(Exception, match="changelog writer"):
        chain(logging=True)


def test_flush_on_any_layer_warns() -> None:
    store = chain(caching=True)
    with pytest.warns(DeprecationWarning, match="KIP-1035"):
        store.flush()
