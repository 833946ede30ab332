"""The metered layers of the timestamped, versioned and session stores, and their query
handlers: typed keys and values in, bytes out, as `iqstate.layers.metered` does for
key-value and window stores (whose serde and sensor plumbing they share)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

from iqstate.errors import SerializationError
from iqstate.iterators import KeyValueIterator, VersionedRecordIterator
from iqstate.layers.metered import (
    MeteredKeyValueStore,
    SerdeLayer,
    metered_key_query,
    metered_limited_range_query,
    metered_range_query,
)
from iqstate.position import PositionBound
from iqstate.queries import (
    KeyQuery,
    LimitedRangeQuery,
    LimitedVersionedRangeQuery,
    MultiVersionedKeyQuery,
    Query,
    RangeQuery,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRangeQuery,
    VersionedRecord,
    Windowed,
)
from iqstate.results import QueryResult
from iqstate.serdes import Serde
from iqstate.store import QueryConfig, SessionStore, VersionedKeyValueStore
from iqstate.timestamped import TimestampedSerde

K = TypeVar("K")
V = TypeVar("V")

_now = time.perf_counter_ns


class MeteredTimestampedKeyValueStore(MeteredKeyValueStore[K, ValueAndTimestamp[V]]):
    """A timestamped store's top layer: a key-value store of `ValueAndTimestamp` values
    (`TimestampedSerde` over the value serde); `KeyQuery` and `RangeQuery` answer the plain
    values, `TimestampedKeyQuery` and `TimestampedRangeQuery` the values with timestamps."""

    kind: ClassVar[str] = "metered.timestamped_key_value"

    def __init__(self, wrapped: Any, key_serde: Serde[K], value_serde: Serde[V]) -> None:
        super().__init__(wrapped, key_serde, TimestampedSerde(value_serde))


def _value_of(pair: tuple[Any, ValueAndTimestamp[Any]]) -> tuple[Any, Any]:
    return pair[0], pair[1].value


def _without_timestamps(result: QueryResult[Any]) -> QueryResult[Any]:
    """A successful answer's values without their timestamps (a failure as it is)."""
    if result.is_failure or result.result is None:
        return result
    answer = result.result
    if isinstance(answer, ValueAndTimestamp):
        return result.swap_result(answer.value)
    return result.swap_result(answer.map(_value_of))


def timestamped_plain_key_query(
    store: MeteredTimestampedKeyValueStore[Any, Any],
    query: KeyQuery[Any, Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """`KeyQuery` on a timestamped store: the value alone, as in Kafka."""
    return _without_timestamps(metered_key_query(store, query, bound, config))


def timestamped_plain_range_query(
    store: MeteredTimestampedKeyValueStore[Any, Any],
    query: RangeQuery[Any, Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """`RangeQuery` on a timestamped store: pairs of plain values, as in Kafka."""
    return _without_timestamps(metered_range_query(store, query, bound, config))


def timestamped_plain_limited_range_query(
    store: MeteredTimestampedKeyValueStore[Any, Any],
    query: LimitedRangeQuery[Any, Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """A page of a `RangeQuery` on a timestamped store (the HTTP service's merged pages)."""
    return _without_timestamps(metered_limited_range_query(store, query, bound, config))


class MeteredVersionedStore(SerdeLayer[VersionedKeyValueStore[bytes, bytes], K, V]):
    """A versioned store's top layer: typed keys and values over the engine's bytes."""

    kind: ClassVar[str] = "metered.versioned"

    def __init__(
        self,
        wrapped: VersionedKeyValueStore[bytes, bytes],
        key_serde: Serde[K],
        value_serde: Serde[V],
    ) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self._put_sensor = self.metrics.sensor("put")
        self._get_sensor = self.metrics.sensor("get")

    @property
    def history_retention_ms(self) -> int:
        return self.wrapped.history_retention_ms

    def put_all_serialized(self, entries: list[tuple[bytes, int, bytes | None]]) -> None:
        """Write `(key, timestamp, value)` versions already serialized (runtime batches)."""
        start = _now()
        self.wrapped.put_all(entries)
        end = _now()
        self._put_sensor.record(end - start, end)

    def put(self, key: K, value: V | None, timestamp: int) -> None:
        self.put_all_serialized([(self.encode_key(key), timestamp, self.encode_value(value))])

    def typed_record(self, record: VersionedRecord[bytes]) -> VersionedRecord[V]:
        return VersionedRecord(self.decode_value(record.value), record.timestamp, record.valid_to)

    def get(self, key: K, as_of: int | None = None) -> VersionedRecord[V] | None:
        start = _now()
        record = self.wrapped.get(self.encode_key(key), as_of)
        typed = None if record is None else self.typed_record(record)
        end = _now()
        self._get_sensor.record(end - start, end)
        return typed

    def _typed_pair(
        self, pair: tuple[bytes, VersionedRecord[bytes]]
    ) -> tuple[K, VersionedRecord[V]]:
        return self.decode_key(pair[0]), self.typed_record(pair[1])

    def _typed_rows(
        self, rows: list[tuple[bytes, VersionedRecord[bytes]]]
    ) -> list[tuple[K, VersionedRecord[V]]]:
        """Rows decoded in one call per serde; raises on the first failure."""
        keys = self.key_serde.deserialize_many([key for key, _ in rows])
        values = self.value_serde.deserialize_many([record.value for _, record in rows])
        return [
            (key, VersionedRecord(value, record.timestamp, record.valid_to))
            for key, value, (_, record) in zip(keys, values, rows, strict=True)
        ]

    def typed_pairs(
        self, raw: KeyValueIterator[bytes, VersionedRecord[bytes]]
    ) -> KeyValueIterator[K, VersionedRecord[V]]:
        """A decoding view of an as-of range: rows in memory decoded in bulk, others (and
        all, if a row fails to decode, so the failure names it) one by one."""
        return raw.map_rows(self._typed_rows, self._typed_pair)


class MeteredSessionStore(SerdeLayer[SessionStore[bytes, bytes], K, V]):
    """A session store's top layer: typed keys and values over the engine's bytes."""

    kind: ClassVar[str] = "metered.session"

    def __init__(
        self, wrapped: SessionStore[bytes, bytes], key_serde: Serde[K], value_serde: Serde[V]
    ) -> None:
        super().__init__(wrapped, key_serde, value_serde)
        self._put_sensor = self.metrics.sensor("put")
        self._fetch_sensor = self.metrics.sensor("fetch")

    @property
    def retention_ms(self) -> int:
        return self.wrapped.retention_ms

    def fetch_sessions(
        self, key: K | None, time_from: int, time_to: int
    ) -> KeyValueIterator[Windowed[K], V]:
        """Sessions starting in `[time_from, time_to]`, of `key` (every key's for `None`),
        decoded (the IQv1 facade's reads)."""
        start = _now()
        raw_key = None if key is None else self.encode_key(key)
        result = self.typed_windows(self.wrapped.fetch_sessions(raw_key, time_from, time_to))
        end = _now()
        self._fetch_sensor.record(end - start, end)
        return result

    def put_all_serialized(self, entries: Iterable[tuple[bytes, int, int, bytes | None]]) -> None:
        """Write `(key, start, end, value)` sessions already serialized (runtime batches)."""
        start = _now()
        self.wrapped.put_all(entries)
        end = _now()
        self._put_sensor.record(end - start, end)


def _encoded_key(store: SerdeLayer[Any, Any, Any], key: Any) -> bytes | QueryResult[Any]:
    try:
        return store.encode_key(key)
    except SerializationError as error:
        return store.serde_failure(error)


def metered_versioned_key_query(
    store: MeteredVersionedStore[Any, Any],
    query: VersionedKeyQuery[Any, Any] | KeyQuery[Any, Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """`VersionedKeyQuery` (and `KeyQuery`, the current value alone) on a versioned store."""
    raw_key = _encoded_key(store, query.key)
    if isinstance(raw_key, QueryResult):
        return raw_key
    as_of = getattr(query, "as_of_timestamp", None)
    raw: QueryResult[Any] = store.wrapped.query(VersionedKeyQuery(raw_key, as_of), bound, config)
    if raw.is_failure or raw.result is None:
        return raw
    try:
        record = store.typed_record(raw.result)
    except SerializationError as error:
        return store.serde_failure(error)
    return raw.swap_result(record.value if type(query) is KeyQuery else record)


def metered_multi_versioned_key_query(
    store: MeteredVersionedStore[Any, Any],
    query: MultiVersionedKeyQuery[Any, Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    raw_key = _encoded_key(store, query.key)
    if isinstance(raw_key, QueryResult):
        return raw_key
    raw: QueryResult[Any] = store.wrapped.query(
        MultiVersionedKeyQuery(raw_key, query.from_timestamp, query.to_timestamp, query.ascending),
        bound,
        config,
    )
    if raw.is_failure:
        return raw
    versions: VersionedRecordIterator[VersionedRecord[bytes]] = raw.result
    return raw.swap_result(versions.map(store.typed_record))


def metered_versioned_range_query(
    store: MeteredVersionedStore[Any, Any],
    query: VersionedRangeQuery[Any, Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """`VersionedRangeQuery`: its bounds serialized, its pairs typed."""
    try:
        lower, upper = store.encode_bound(query.lower_bound), store.encode_bound(query.upper_bound)
    except SerializationError as error:
        return store.serde_failure(error)
    raw_query: Query[Any] = VersionedRangeQuery(lower, upper, query.as_of_timestamp)
    return _typed_versioned_pairs(store, raw_query, bound, config)


def metered_limited_versioned_range_query(
    store: MeteredVersionedStore[Any, Any],
    query: LimitedVersionedRangeQuery[Any, Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """A page of a `VersionedRangeQuery`: only the page read, and typed."""
    try:
        lower, upper = store.encode_bound(query.lower_bound), store.encode_bound(query.upper_bound)
    except SerializationError as error:
        return store.serde_failure(error)
    raw_query: Query[Any] = LimitedVersionedRangeQuery(
        lower, upper, query.as_of_timestamp, query.limit
    )
    return _typed_versioned_pairs(store, raw_query, bound, config)


def _typed_versioned_pairs(
    store: MeteredVersionedStore[Any, Any],
    raw_query: Query[Any],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    raw: QueryResult[Any] = store.wrapped.query(raw_query, bound, config)
    if raw.is_failure:
        return raw
    return raw.swap_result(store.typed_pairs(raw.result))
