"""Query value objects, StateQueryRequest options, QueryResult and StateQueryResult."""

import pickle

import pytest

from iqstate import (
    FailureReason,
    IllegalQueryResultAccess,
    KeyQuery,
    Position,
    PositionBound,
    QueryResult,
    RangeQuery,
    ResultOrder,
    StateQueryRequest,
    StateQueryResult,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)


def test_key_query() -> None:
    query = KeyQuery.with_key("k")
    assert query.key == "k" and not query.is_skip_cache
    skipped = query.skip_cache()
    assert skipped.is_skip_cache and skipped.key == "k" and not query.is_skip_cache
    assert query == KeyQuery.with_key("k") and hash(query) == hash(KeyQuery.with_key("k"))
    assert query != skipped
    with pytest.raises(ValueError, match="None"):
        KeyQuery.with_key(None)
    with pytest.raises(AttributeError):
        query.key = "other"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(skipped)) == skipped
    assert repr(query) == "KeyQuery(key='k', is_skip_cache=False)"


def test_range_query_factories() -> None:
    assert RangeQuery.with_range(1, 5).lower_bound == 1
    assert RangeQuery.with_range(None, 5).lower_bound is None
    assert RangeQuery.with_lower_bound(3).upper_bound is None
    assert RangeQuery.with_upper_bound(3).lower_bound is None
    unbounded = RangeQuery.with_no_bounds()
    assert (unbounded.lower_bound, unbounded.upper_bound) == (None, None)
    assert unbounded.result_order is ResultOrder.ANY
    descending = RangeQuery.with_range(1, 2).with_descending_keys()
    assert descending.result_order is ResultOrder.DESCENDING and descending.is_descending
    assert descending.with_ascending_keys().result_order is ResultOrder.ASCENDING
    with pytest.raises(ValueError):
        RangeQuery.with_lower_bound(None)
    with pytest.raises(ValueError):
        RangeQuery.with_upper_bound(None)


def test_window_queries() -> None:
    query = WindowKeyQuery.with_key_and_window_start_range("k", 10, 20)
    assert (query.key, query.time_from, query.time_to) == ("k", 10, 20)
    every = WindowRangeQuery.with_window_start_range(0, 5)
    assert (every.time_from, every.time_to) == (0, 5)
    with pytest.raises(TypeError, match="time_from"):
        WindowRangeQuery.with_window_start_range("0", 5)  # type: ignore[arg-type]
    assert Windowed("k", 0, 10) < Windowed("k", 5, 15)


def test_request_is_immutable_and_copies() -> None:
    base = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("k"))
    assert base.store_name == "counts" and base.query == KeyQuery.with_key("k")
    assert base.is_all_partitions and not base.is_require_active
    assert not base.is_execution_info_enabled and base.position_bound.is_unbounded()
    with pytest.raises(ValueError, match="all partitions"):
        _ = base.partitions
    parts = {0, 2}
    narrowed = base.with_partitions(parts)
    parts.add(5)
    assert narrowed.partitions == frozenset({0, 2}) and base.is_all_partitions
    assert narrowed.with_all_partitions().is_all_partitions
    bound = PositionBound.at(Position.from_map({"t": {0: 1}}))
    full = narrowed.with_position_bound(bound).require_active().enable_execution_info()
    assert full.position_bound == bound and full.is_require_active
    assert full.is_execution_info_enabled
    assert not narrowed.is_require_active, "options return new requests"
    with pytest.raises(AttributeError):
        base.x = 1  # type: ignore[attr-defined]
    for field in ("store_name", "query", "partition_set", "position_bound"):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(base, field, None)
    assert base.store_name == "counts" and base.partition_set is None
    with pytest.raises(ValueError):
        base.with_partitions([-1])
    with pytest.raises(TypeError):
        StateQueryRequest.in_store("s").with_query("not a query")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        StateQueryRequest.in_store("")


def test_query_result_success() -> None:
    result = QueryResult.for_result(42)
    assert result.is_success and not result.is_failure and result.result == 42
    assert result.execution_info == [] and result.position is None
    with pytest.raises(IllegalQueryResultAccess, match="did not fail"):
        _ = result.failure_reason
    with pytest.raises(IllegalQueryResultAccess, match="did not fail"):
        _ = result.failure_message
    result.position = Position.from_map({"t": {0: 1}})
    result.add_execution_info("layer A")
    swapped = result.swap_result("forty-two")
    assert swapped.result == "forty-two"
    assert swapped.position == result.position and swapped.execution_info == ["layer A"]


def test_query_result_failure() -> None:
    result = QueryResult.for_failure(FailureReason.NOT_PRESENT, "gone")
    assert result.is_failure and result.failure_reason is FailureReason.NOT_PRESENT
    assert result.failure_message == "gone"
    with pytest.raises(IllegalQueryResultAccess, match="NOT_PRESENT: gone") as error:
        _ = result.result
    assert isinstance(error.value, ValueError)
    with pytest.raises(IllegalQueryResultAccess):
        result.swap_result(1)
    unknown = QueryResult.for_unknown_query_type(KeyQuery.with_key("k"), object())
    assert unknown.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
    assert "KeyQuery" in unknown.failure_message and "It answers" not in unknown.failure_message
    told = QueryResult.for_unknown_query_type(
        WindowKeyQuery.with_key_and_window_start_range("k", 0, 1), object(), [RangeQuery, KeyQuery]
    )
    assert "It answers KeyQuery, RangeQuery." in told.failure_message
    position = Position.from_map({"t": {0: 1}})
    bound = PositionBound.at(Position.from_map({"t": {0: 9}}))
    behind = QueryResult.not_up_to_bound(position, bound, 3)
    assert behind.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert "partition 3" in behind.failure_message and behind.position == position
    uninitialised = QueryResult.not_up_to_bound(None, bound, None)
    assert "not initialized" in uninitialised.failure_message


def test_state_query_result() -> None:
    combined: StateQueryResult[int | None] = StateQueryResult()
    assert combined.only_partition_result() is None
    assert combined.position == Position.empty()
    hit = QueryResult.for_result(1)
    hit.position = Position.from_map({"t": {0: 5}})
    miss = QueryResult.for_result(None)
    miss.position = Position.from_map({"t": {1: 7}})
    failed = QueryResult.for_failure(FailureReason.NOT_ACTIVE, "standby")
    combined.add_result(0, hit)
    combined.add_result(1, miss)
    combined.add_result(2, failed)
    assert combined.only_partition_result() is hit
    assert combined.partition_results == {0: hit, 1: miss, 2: failed}
    assert combined.position == Position.from_map({"t": {0: 5, 1: 7}})
    second = QueryResult.for_result(2)
    combined.add_result(3, second)
    with pytest.raises(ValueError, match=r"exactly one.*partitions \[0, 3\].*partition_results"):
        combined.only_partition_result()
    global_result = QueryResult.for_result(9)
    global_result.position = Position.from_map({"g": {0: 1}})
    combined.set_global_result(global_result)
    assert combined.global_result is global_result
    assert combined.position == Position.from_map({"g": {0: 1}})
