"""Handlers that answer the built-in queries through the store API.

Any engine whose stores implement `KeyValueStore` / `WindowStore` over bytes can
register these for its store kinds instead of writing its own.
"""

from __future__ import annotations

from typing import Any

from iqstate.dispatch import HandlerTable
from iqstate.iterators import KeyValueIterator
from iqstate.position import PositionBound
from iqstate.queries import (
    KeyQuery,
    LimitedRangeQuery,
    RangeQuery,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.results import QueryResult
from iqstate.store import KeyValueStore, QueryConfig, WindowStore


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
    return QueryResult.for_result(store.fetch_all(query.time_from, query.time_to))


def key_value_handlers() -> HandlerTable:
    return {
        KeyQuery: answer_key_query,
        RangeQuery: answer_range_query,
        LimitedRangeQuery: answer_limited_range_query,
    }


def window_handlers() -> HandlerTable:
    return {WindowKeyQuery: answer_window_key_query, WindowRangeQuery: answer_window_range_query}
