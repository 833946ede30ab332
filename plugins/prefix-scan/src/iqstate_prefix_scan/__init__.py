"""`PrefixScanQuery`, added to existing engines through the plugin hooks alone.

The metered layer serializes the prefix and deserializes the pairs (a timestamped store's
without their timestamps, as its `RangeQuery` answers them), the caching layer
merges its write buffer in (both registered by their kind), and every engine's key-value
store answers through its `KeyValueStore.prefix_scan` (registered once, for the
`KeyValueStore` interface): engines installed later are served too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from iqstate import (
    KeyValueIterator,
    PositionBound,
    Query,
    QueryConfig,
    QueryResult,
    RangeQuery,
    ValueAndTimestamp,
)
from iqstate.dispatch import answer
from iqstate.errors import SerializationError
from iqstate.hookspecs import hookimpl
from iqstate.store import KeyValueStore

K = TypeVar("K")
V = TypeVar("V")


class PrefixScanQuery(Query[KeyValueIterator[K, V]], Generic[K, V]):
    """The pairs whose serialized key starts with the serialized `prefix`."""

    __slots__ = ("prefix",)

    prefix: K

    def __init__(self, prefix: K) -> None:
        if prefix is None:
            raise ValueError("PrefixScanQuery: the prefix must not be None")
        object.__setattr__(self, "prefix", prefix)

    @classmethod
    def with_prefix(cls, prefix: K) -> PrefixScanQuery[K, V]:
        return cls(prefix)


def scan_engine(
    store: Any, query: PrefixScanQuery[bytes, bytes], bound: PositionBound, config: QueryConfig
) -> QueryResult[Any]:
    """Engines and the caching layer: their own `prefix_scan` over bytes."""
    return QueryResult.for_result(store.prefix_scan(query.prefix))


def scan_cached(
    store: Any, query: PrefixScanQuery[bytes, bytes], bound: PositionBound, config: QueryConfig
) -> QueryResult[Any]:
    """The caching layer answers itself, so buffered writes and deletes are seen."""
    return answer(store, scan_engine, query, bound, config)


def scan_metered(
    store: Any, query: PrefixScanQuery[Any, Any], bound: PositionBound, config: QueryConfig
) -> QueryResult[Any]:
    """Serialize the prefix, ask the layer beneath, and type the pairs it returns."""
    try:
        raw_prefix = store.encode_key(query.prefix)
    except SerializationError as error:
        return store.serde_failure(error)  # type: ignore[no-any-return]
    raw: QueryResult[Any] = store.wrapped.query(PrefixScanQuery(raw_prefix), bound, config)
    if raw.is_failure:
        return raw
    return raw.swap_result(store.typed(raw.result))


def scan_timestamped(
    store: Any, query: PrefixScanQuery[Any, Any], bound: PositionBound, config: QueryConfig
) -> QueryResult[Any]:
    """A timestamped store: the values without their timestamps, as its `RangeQuery`."""
    typed = scan_metered(store, query, bound, config)
    if typed.is_failure:
        return typed
    return typed.swap_result(typed.result.map(_without_timestamp))


def _without_timestamp(pair: tuple[Any, ValueAndTimestamp[Any]]) -> tuple[Any, Any]:
    return pair[0], pair[1].value


@hookimpl
def iqstate_register_query_handlers(register: Any) -> None:
    register(PrefixScanQuery, "metered.key_value", scan_metered)
    register(PrefixScanQuery, "metered.timestamped_key_value", scan_timestamped)
    register(PrefixScanQuery, "caching.key_value", scan_cached)
    register(PrefixScanQuery, KeyValueStore, scan_engine)


def _decode(body: Any, key_from_json: Any) -> PrefixScanQuery[Any, Any]:
    if body.get("prefix") is None:
        raise ValueError("a prefix_scan query needs a non-null 'prefix'")
    return PrefixScanQuery(key_from_json(body["prefix"]))


def _encode(result: Any, to_json: Any) -> Any:
    with result as pairs:
        return [[to_json(key), to_json(value)] for key, value in pairs]


def _resume(
    query: PrefixScanQuery[Any, Any], key: Any, serialize_key: Callable[[Any], bytes]
) -> tuple[Query[Any], Callable[[bytes], bool]]:
    """The prefix's keys from `key` on (from the prefix itself for `None`): a range read
    while keys keep the prefix (a prefix's keys are contiguous in byte order)."""
    prefix = serialize_key(query.prefix)
    start = query.prefix if key is None else key
    return RangeQuery.with_lower_bound(start), lambda key_bytes: key_bytes.startswith(prefix)


@hookimpl
def iqstate_register_query_codecs(register: Any) -> None:
    register("prefix_scan", PrefixScanQuery, _decode, _encode, _resume)
