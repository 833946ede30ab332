"""The caching layer: a bounded write buffer over a bytes key-value store.

Writes (deletes included, as tombstones) collect in a sorted buffer and reach the store
beneath in one `put_all` when the buffer is full or at `commit`. Reads see the buffer
first. The buffer also holds the position of the writes it holds, so the store beneath
never claims a position its data does not reflect; the layer's own position is the
merge of both. `close` without `commit` discards the buffer, like any uncommitted write.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any

from sortedcontainers import SortedDict

from iqstate.dispatch import answer
from iqstate.iterators import KeyValueIterator
from iqstate.keyspace import prefix_upper_bound
from iqstate.layers.wrapped import WrappedStore
from iqstate.position import Position, PositionBound, TopicPartition
from iqstate.queries import KeyQuery, LimitedRangeQuery, RangeQuery, ResultOrder
from iqstate.results import QueryResult
from iqstate.store import KeyValueStore, QueryConfig

DEFAULT_CACHE_ENTRIES = 10_000
_UNBOUNDED = PositionBound.unbounded()
_EMPTY = Position.empty()


def merge_with_buffer(
    stored: Iterable[tuple[bytes, bytes]],
    buffered: list[tuple[bytes, bytes | None]],
    descending: bool,
) -> Iterator[tuple[bytes, bytes]]:
    """Merge two key-sorted streams; buffered entries win ties and `None` hides a key."""
    stored_iter = iter(stored)
    buffered_iter = iter(buffered)
    stored_item = next(stored_iter, None)
    buffered_item = next(buffered_iter, None)
    while stored_item is not None or buffered_item is not None:
        if buffered_item is None:
            assert stored_item is not None
            yield stored_item
            yield from stored_iter
            return
        if stored_item is not None:
            stored_key, buffered_key = stored_item[0], buffered_item[0]
            stored_first = stored_key > buffered_key if descending else stored_key < buffered_key
            if stored_first:
                yield stored_item
                stored_item = next(stored_iter, None)
                continue
            if stored_key == buffered_key:
                stored_item = next(stored_iter, None)
        key, value = buffered_item
        if value is not None:
            yield key, value
        buffered_item = next(buffered_iter, None)


class CachingKeyValueStore(WrappedStore[KeyValueStore[bytes, bytes]], KeyValueStore[bytes, bytes]):
    """Buffers writes for the store beneath and answers reads and queries through the buffer."""

    kind = "caching.key_value"

    def __init__(
        self, wrapped: KeyValueStore[bytes, bytes], max_entries: int = DEFAULT_CACHE_ENTRIES
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"caching layer: max_entries must be an int >= 1, got {max_entries!r}")
        super().__init__(wrapped)
        self.max_entries = max_entries
        self._buffer: SortedDict = SortedDict()
        self._pending_position = Position.empty()

    @property
    def position(self) -> Position:
        pending = self._pending_position
        if pending is _EMPTY:
            return self.wrapped.position
        return self.wrapped.position.merge(pending)

    def update_position(self, position: Position) -> None:
        self._pending_position = self._pending_position.merge(position)

    def buffered_entries(self) -> int:
        return len(self._buffer)

    def flush_buffer(self) -> None:
        """Write the buffer and its position to the store beneath."""
        if self._pending_position is not _EMPTY:
            self.wrapped.update_position(self._pending_position)
            self._pending_position = _EMPTY
        if self._buffer:
            self.wrapped.put_all(list(self._buffer.items()))
            self._buffer.clear()

    def prepare_commit(self) -> None:
        self.flush_buffer()
        self.wrapped.prepare_commit()

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        self.flush_buffer()
        self.wrapped.commit(changelog_offsets)

    def close(self) -> None:
        self._buffer.clear()
        self._pending_position = _EMPTY
        self.wrapped.close()

    def get(self, key: bytes) -> bytes | None:
        buffer = self._buffer
        if key in buffer:
            cached: bytes | None = buffer[key]
            return cached
        return self.wrapped.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if not self.wrapped.is_open:
            self.wrapped.get(key)  # raises the engine's "not open" error
        self._buffer[key] = value
        if len(self._buffer) >= self.max_entries:
            self.flush_buffer()

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: bytes) -> bytes | None:
        old = self.get(key)
        self.put(key, None)
        return old

    def _buffered(
        self, lower: bytes | None, upper: bytes | None, descending: bool, inclusive_upper: bool
    ) -> list[tuple[bytes, bytes | None]]:
        buffer = self._buffer
        keys = buffer.irange(lower, upper, inclusive=(True, inclusive_upper), reverse=descending)
        return [(key, buffer[key]) for key in keys]

    def merged_range(
        self,
        stored: KeyValueIterator[bytes, bytes],
        lower: bytes | None,
        upper: bytes | None,
        descending: bool,
        inclusive_upper: bool = True,
    ) -> KeyValueIterator[bytes, bytes]:
        """`stored` (a range of the store beneath) with the buffer's entries merged in."""
        buffered = self._buffered(lower, upper, descending, inclusive_upper)
        if not buffered:
            return stored
        return KeyValueIterator(merge_with_buffer(stored, buffered, descending), stored.close)

    def range(self, lower: bytes | None, upper: bytes | None) -> KeyValueIterator[bytes, bytes]:
        return self.merged_range(self.wrapped.range(lower, upper), lower, upper, False)

    def reverse_range(
        self, lower: bytes | None, upper: bytes | None
    ) -> KeyValueIterator[bytes, bytes]:
        return self.merged_range(self.wrapped.reverse_range(lower, upper), lower, upper, True)

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        upper = prefix_upper_bound(prefix)
        stored = self.wrapped.prefix_scan(prefix)
        return self.merged_range(stored, prefix, upper, False, inclusive_upper=upper is None)

    def approximate_num_entries(self) -> int:
        added = sum(1 for value in self._buffer.values() if value is not None)
        return self.wrapped.approximate_num_entries() + added


# Query handlers of the caching layer, registered by iqstate.builtin_plugin.


def _cached_range_query(
    store: CachingKeyValueStore,
    query: RangeQuery[bytes, bytes],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    result = store.wrapped.query(query, _UNBOUNDED, config)
    position = store.position
    if result.is_success:
        merged = store.merged_range(
            result.result, query.lower_bound, query.upper_bound, query.is_descending
        )
        result = result.swap_result(merged)
    result.position = position
    return result


def caching_key_query(
    store: CachingKeyValueStore,
    query: KeyQuery[bytes, bytes],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """`KeyQuery` from the buffer, or from beneath on a miss or with `skip_cache`.

    Written out rather than through `dispatch.answer`: every key lookup of a caching chain
    runs it, and the merged position is computed once for the bound check and the result.
    """
    position = store.position
    if bound is not _UNBOUNDED and not position.dominates(bound.position):
        return QueryResult.not_up_to_bound(position, bound, store.partition)
    if query.is_skip_cache:
        return store.wrapped.query(query, bound, config)
    buffer = store._buffer
    key = query.key
    if key in buffer:
        result: QueryResult[Any] = QueryResult.for_result(buffer[key])
    else:
        result = store.wrapped.query(query, _UNBOUNDED, config)
    result.position = position
    return result


def caching_range_query(
    store: CachingKeyValueStore,
    query: RangeQuery[bytes, bytes],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """`RangeQuery` from beneath with the buffer merged in, deletes included."""
    return answer(store, _cached_range_query, query, bound, config)


def caching_limited_range_query(
    store: CachingKeyValueStore,
    query: LimitedRangeQuery[bytes, bytes],
    bound: PositionBound,
    config: QueryConfig,
) -> QueryResult[Any]:
    """A page of a range with the buffer merged in: the range as `RangeQuery` reads it,
    its first `limit` pairs kept (the buffer's deletes decide which pairs a page holds)."""
    order = ResultOrder.DESCENDING if query.descending else ResultOrder.ASCENDING
    result = caching_range_query(
        store, RangeQuery(query.lower_bound, query.upper_bound, order), bound, config
    )
    if result.is_failure:
        return result
    with result.result as pairs:
        return result.swap_result(KeyValueIterator.of_rows(list(islice(pairs, query.limit))))
