"""Handlers that answer the built-in queries through the store API.

Any engine whose stores implement `KeyValueStore` / `WindowStore` over bytes can
register these for its store kinds instead of writing its own.
"""

from __future__ import annotations

from typing import Any

from iqstate.dispatch import HandlerTable
from iqstate.iterators import KeyValueIterator, VersionedRecordIterator
from iqstate.position import PositionBound
from iqstate.queries import (
    KeyQuery,
    LimitedRangeQuery,
    LimitedVersionedRangeQuery,
    MultiVersionedKeyQuery,
    RangeQuery,
    VersionedKeyQuery,
    VersionedRangeQuery,
    VersionedRecord,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
    window_end,
)
from iqstate.results import QueryResult
from iqstate.store import (
    KeyValueStore,
    QueryConfig,
    SessionStore,
    VersionedKeyValueStore,
    WindowStore,
)


def answer_key_query(
    store: KeyValueStore[Any, Any], query: KeyQuery[Any, Any], _: PositionBound, __: QueryConfig
) -> QueryResult[Any]:
    return QueryResult.for_result(store.get(query.key))


def answer_range_query(
    store: KeyValueStore[Any, Any], query: RangeQuery[Any, Any], _: PositionBound, __: QueryConfig
) -> QueryResult[KeyValueIterator[Any, Any]]:
    if query.is_descending:
        return QueryResult.for_result(store.reverse_range(query.lower_bound, query.upper_bound))
    return QueryResult.for_result(store.range(query.lower_bound, query.upper_bound))


def answer_limited_range_query(
    store: KeyValueStore[Any, Any],
    query: LimitedRangeQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[KeyValueIterator[Any, Any]]:
    return QueryResult.for_result(
        store.limited_range(query.lower_bound, query.upper_bound, query.limit, query.descending)
    )


def answer_window_key_query(
    store: WindowStore[Any, Any],
    query: WindowKeyQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[KeyValueIterator[int, Any]]:
    return QueryResult.for_result(store.fetch(query.key, query.time_from, query.time_to))


def answer_window_range_query(
    store: WindowStore[Any, Any],
    query: WindowRangeQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[KeyValueIterator[Windowed[Any], Any]]:
    if query.key is not None:
        key = query.key
        return QueryResult.for_result(
            store.fetch(key, query.time_from, query.time_to).map(
                lambda pair: (
                    Windowed(key, pair[0], window_end(pair[0], store.window_size_ms)),
                    pair[1],
                )
            )
        )
    return QueryResult.for_result(store.fetch_all(query.time_from, query.time_to))


def answer_versioned_key_query(
    store: VersionedKeyValueStore[Any, Any],
    query: VersionedKeyQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[VersionedRecord[Any] | None]:
    return QueryResult.for_result(store.get(query.key, query.as_of_timestamp))


def answer_latest_value_query(
    store: VersionedKeyValueStore[Any, Any],
    query: KeyQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[Any]:
    """A `KeyQuery` on a versioned store: the current value (Kafka answers
    `UNKNOWN_QUERY_TYPE`)."""
    record = store.get(query.key)
    return QueryResult.for_result(None if record is None else record.value)


def answer_multi_versioned_key_query(
    store: VersionedKeyValueStore[Any, Any],
    query: MultiVersionedKeyQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[VersionedRecordIterator[VersionedRecord[Any]]]:
    versions = store.versions(query.key, query.from_timestamp, query.to_timestamp, query.ascending)
    return QueryResult.for_result(VersionedRecordIterator(versions))


def answer_versioned_range_query(
    store: VersionedKeyValueStore[Any, Any],
    query: VersionedRangeQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[KeyValueIterator[Any, VersionedRecord[Any]]]:
    return QueryResult.for_result(
        store.range_as_of(query.lower_bound, query.upper_bound, query.as_of_timestamp)
    )


def answer_limited_versioned_range_query(
    store: VersionedKeyValueStore[Any, Any],
    query: LimitedVersionedRangeQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[KeyValueIterator[Any, VersionedRecord[Any]]]:
    return QueryResult.for_result(
        store.range_as_of(query.lower_bound, query.upper_bound, query.as_of_timestamp, query.limit)
    )


def answer_session_query(
    store: SessionStore[Any, Any],
    query: WindowRangeQuery[Any, Any],
    _: PositionBound,
    __: QueryConfig,
) -> QueryResult[KeyValueIterator[Windowed[Any], Any]]:
    """`WindowRangeQuery` on a session store: sessions of `query.key` (every key's without
    one) starting in the query's time range."""
    return QueryResult.for_result(store.fetch_sessions(query.key, query.time_from, query.time_to))


def key_value_handlers() -> HandlerTable:
    return {
        KeyQuery: answer_key_query,
        RangeQuery: answer_range_query,
        LimitedRangeQuery: answer_limited_range_query,
    }


def window_handlers() -> HandlerTable:
    return {WindowKeyQuery: answer_window_key_query, WindowRangeQuery: answer_window_range_query}


def versioned_handlers() -> HandlerTable:
    return {
        VersionedKeyQuery: answer_versioned_key_query,
        MultiVersionedKeyQuery: answer_multi_versioned_key_query,
        VersionedRangeQuery: answer_versioned_range_query,
        LimitedVersionedRangeQuery: answer_limited_versioned_range_query,
        KeyQuery: answer_latest_value_query,
    }


def session_handlers() -> HandlerTable:
    return {WindowRangeQuery: answer_session_query}
