"""`EntryCountQuery`: a query type of this engine's own, with its handler and HTTP codec."""

from __future__ import annotations

from typing import Any

from iqstate import PositionBound, Query, QueryConfig, QueryResult


class EntryCountQuery(Query[int]):
    """About how many entries a store partition holds, writes not yet committed included."""

    __slots__ = ()


def answer_entry_count(
    store: Any, query: EntryCountQuery, bound: PositionBound, config: QueryConfig
) -> QueryResult[int]:
    return QueryResult.for_result(store.approximate_num_entries())


def decode(body: Any, key_from_json: Any) -> EntryCountQuery:
    return EntryCountQuery()


def encode(result: int, to_json: Any) -> int:
    return result
