"""IQv1 (KIP-67, KIP-562): read-only store facades across this instance's partitions.

`app.store(params)` returns a facade; the partitions behind it are resolved on every call,
so a partition that moved away since raises `InvalidStateStoreError` at the call that
needed it, with a message telling the caller to re-discover the store's location.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, overload

from iqstate.errors import InvalidStateStoreError
from iqstate.iterators import KeyValueIterator
from iqstate.queries import ValueAndTimestamp, Windowed
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.spec import (
    KeyValueStoreSpec,
    SessionStoreSpec,
    StoreSpec,
    StoreType,
    TimestampedKeyValueStoreSpec,
    WindowStoreSpec,
)
from iqstate.serdes import encoding_error
from iqstate.times import MAX_MS, MIN_MS, Time, milliseconds

T = TypeVar("T")
R = TypeVar("R")

PartitionResolver = Callable[[], list[HostedPartition]]


@dataclass(frozen=True)
class QueryableStoreType(Generic[T]):
    """Which kind of store a caller expects, and the facade it gets for it."""

    spec_type: type[StoreSpec]
    facade: Callable[[StoreSpec, PartitionResolver], T]

    @property
    def store_type(self) -> StoreType:
        return self.spec_type.store_type

    def accepts(self, spec: StoreSpec) -> bool:
        return isinstance(spec, self.spec_type)

    def __repr__(self) -> str:
        return f"QueryableStoreTypes.{self.store_type}_store()"


class QueryableStoreTypes:
    """The store types `StoreQueryParameters` can ask for."""

    @staticmethod
    def key_value_store() -> QueryableStoreType[CompositeReadOnlyKeyValueStore]:
        """A key-value store; a timestamped one is read without its timestamps, as in Kafka."""
        return QueryableStoreType(KeyValueStoreSpec, key_value_facade)

    @staticmethod
    def timestamped_key_value_store() -> QueryableStoreType[CompositeReadOnlyKeyValueStore]:
        """A timestamped key-value store, its values `ValueAndTimestamp`."""
        return QueryableStoreType(TimestampedKeyValueStoreSpec, CompositeReadOnlyKeyValueStore)

    @staticmethod
    def window_store() -> QueryableStoreType[CompositeReadOnlyWindowStore]:
        return QueryableStoreType(WindowStoreSpec, CompositeReadOnlyWindowStore)

    @staticmethod
    def session_store() -> QueryableStoreType[CompositeReadOnlySessionStore]:
        """A session store (Kafka's `ReadOnlySessionStore`)."""
        return QueryableStoreType(SessionStoreSpec, CompositeReadOnlySessionStore)


@dataclass(frozen=True)
class StoreQueryParameters(Generic[T]):
    """Which store to open for IQv1 reads, which partition, and whether stale replicas count."""

    store_name: str
    queryable_store_type: QueryableStoreType[T]
    partition: int | None = None
    stale_stores_enabled: bool = False

    @classmethod
    def from_name_and_type(
        cls, store_name: str, queryable_store_type: QueryableStoreType[T]
    ) -> StoreQueryParameters[T]:
        return cls(store_name, queryable_store_type)

    def with_partition(self, partition: int) -> StoreQueryParameters[T]:
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise ValueError(f"with_partition needs a partition number >= 0, got {partition!r}")
        return replace(self, partition=partition)

    def enable_stale_stores(self) -> StoreQueryParameters[T]:
        """Also read standby and restoring replicas, not only running actives."""
        return replace(self, stale_stores_enabled=True)


_MIGRATED = (
    "State store {name!r} is not available anymore and may have been migrated to another "
    "instance; please re-discover its location from the state metadata."
)


class _Composite:
    """Resolves the partitions for each call and reads them under their locks."""

    def __init__(self, spec: StoreSpec, resolve: PartitionResolver) -> None:
        self._spec = spec
        self._resolve = resolve

    @property
    def name(self) -> str:
        return self._spec.name

    def _partitions(self) -> list[HostedPartition]:
        return self._resolve()

    def _read(self, hosted: HostedPartition, read: Callable[[Any], R]) -> R:
        with hosted.lock:
            if hosted.closed:
                raise InvalidStateStoreError(_MIGRATED.format(name=self._spec.name))
            return read(hosted.chain.typed)

    def _key_partition(self, key: Any) -> HostedPartition:
        """The partition holding `key`; `InvalidStateStoreError` when this facade does not
        read it here (Kafka's facade answers null then: a false "absent")."""
        serde = self._spec.key_serde
        try:
            key_bytes = serde.serialize(key)
        except Exception as exc:
            raise encoding_error(self._spec.name, serde, key, "key", exc) from exc
        partition = self._spec.partition_of(key, key_bytes)
        hosted = next((h for h in self._partitions() if h.partition == partition), None)
        if hosted is None:
            raise InvalidStateStoreError(
                f"store {self._spec.name!r}: key {key!r} is in partition {partition}, which "
                "this facade does not read here (not hosted as a running active replica, or "
                "left out by with_partition); app.query_metadata_for_key finds its host, and "
                "enable_stale_stores() also reads standby replicas"
            )
        return hosted

    def _concatenate(
        self, open_one: Callable[[Any], KeyValueIterator[Any, Any]]
    ) -> KeyValueIterator[Any, Any]:
        iterators = [self._read(hosted, open_one) for hosted in self._partitions()]

        def close_all() -> None:
            for iterator in iterators:
                iterator.close()

        chained: Iterator[Any] = itertools.chain.from_iterable(iterators)
        return KeyValueIterator(chained, close_all)


class CompositeReadOnlyKeyValueStore(_Composite):
    """Reads of a key-value store across the partitions hosted here.

    `get` goes to the key's partition; `range`, `all` and `prefix_scan` concatenate the
    partitions' results in partition order (each partition key-ordered), as Kafka does.
    """

    def get(self, key: Any) -> Any:
        return self._read(self._key_partition(key), lambda store: store.get(key))

    def range(self, lower: Any, upper: Any) -> KeyValueIterator[Any, Any]:
        return self._concatenate(lambda store: store.range(lower, upper))

    def reverse_range(self, lower: Any, upper: Any) -> KeyValueIterator[Any, Any]:
        return self._concatenate(lambda store: store.reverse_range(lower, upper))

    def all(self) -> KeyValueIterator[Any, Any]:
        return self._concatenate(lambda store: store.all())

    def reverse_all(self) -> KeyValueIterator[Any, Any]:
        return self._concatenate(lambda store: store.reverse_all())

    def prefix_scan(self, prefix: Any) -> KeyValueIterator[Any, Any]:
        return self._concatenate(lambda store: store.prefix_scan(prefix))

    def approximate_num_entries(self) -> int:
        return sum(
            self._read(hosted, lambda store: store.approximate_num_entries())
            for hosted in self._partitions()
        )


class TimestampsStrippedKeyValueStore(CompositeReadOnlyKeyValueStore):
    """A timestamped store read as a plain key-value store: its values without their
    timestamps (Kafka's facade for a timestamped store asked for as `keyValueStore()`)."""

    def get(self, key: Any) -> Any:
        found = super().get(key)
        return None if found is None else found.value

    def _concatenate(
        self, open_one: Callable[[Any], KeyValueIterator[Any, Any]]
    ) -> KeyValueIterator[Any, Any]:
        return super()._concatenate(open_one).map(_without_timestamp)


def _without_timestamp(pair: tuple[Any, ValueAndTimestamp[Any]]) -> tuple[Any, Any]:
    return pair[0], pair[1].value


def key_value_facade(spec: StoreSpec, resolve: PartitionResolver) -> CompositeReadOnlyKeyValueStore:
    """The facade `QueryableStoreTypes.key_value_store()` gives for `spec`."""
    if isinstance(spec, TimestampedKeyValueStoreSpec):
        return TimestampsStrippedKeyValueStore(spec, resolve)
    return CompositeReadOnlyKeyValueStore(spec, resolve)


class CompositeReadOnlyWindowStore(_Composite):
    """Reads of a window store across the partitions hosted here."""

    @overload
    def fetch(self, key: Any, time_from: Time) -> Any: ...

    @overload
    def fetch(self, key: Any, time_from: Time, time_to: Time) -> KeyValueIterator[int, Any]: ...

    def fetch(self, key: Any, time_from: Time, time_to: Time | None = None) -> Any:
        """`fetch(key, time_from, time_to)`: `(window start, value)` of `key`'s windows
        starting in that range; `fetch(key, time)`: the value of its window starting at
        `time`, `None` if there is none (Kafka's two `ReadOnlyWindowStore.fetch`)."""
        start = milliseconds(time_from, "time_from")
        if time_to is None:
            with self.fetch(key, start, start) as windows:
                return next((value for begins, value in windows if begins == start), None)
        end = milliseconds(time_to, "time_to")
        return self._read(self._key_partition(key), lambda store: store.fetch(key, start, end))

    def fetch_all(self, time_from: Time, time_to: Time) -> KeyValueIterator[Windowed[Any], Any]:
        start, end = milliseconds(time_from, "time_from"), milliseconds(time_to, "time_to")
        return self._concatenate(lambda store: store.fetch_all(start, end))

    def all(self) -> KeyValueIterator[Windowed[Any], Any]:
        return self._concatenate(lambda store: store.all())


class CompositeReadOnlySessionStore(_Composite):
    """Reads of a session store across the partitions hosted here (Kafka's
    `ReadOnlySessionStore` for one key: a key's sessions live in its partition)."""

    def fetch(self, key: Any) -> KeyValueIterator[Windowed[Any], Any]:
        """Every session of `key`, by start (then end)."""
        return self.find_sessions(key, MIN_MS, MAX_MS)

    def backward_fetch(self, key: Any) -> KeyValueIterator[Windowed[Any], Any]:
        """Every session of `key`, latest start first."""
        return _backward(self.fetch(key))

    def find_sessions(
        self, key: Any, earliest_session_end_time: Time, latest_session_start_time: Time
    ) -> KeyValueIterator[Windowed[Any], Any]:
        """The sessions of `key` that overlap `[earliest_session_end_time,
        latest_session_start_time]`: ending at or after the one, starting at or before the
        other (Kafka's `findSessions`), by start."""
        _check_key(key)
        earliest_end = milliseconds(earliest_session_end_time, "earliest_session_end_time")
        latest_start = milliseconds(latest_session_start_time, "latest_session_start_time")
        sessions = self._read(
            self._key_partition(key),
            lambda store: store.fetch_sessions(key, MIN_MS, latest_start),
        )
        overlapping = (pair for pair in sessions if pair[0].end_ms >= earliest_end)
        return KeyValueIterator(overlapping, sessions.close)

    def backward_find_sessions(
        self, key: Any, earliest_session_end_time: Time, latest_session_start_time: Time
    ) -> KeyValueIterator[Windowed[Any], Any]:
        """`find_sessions`, latest start first."""
        return _backward(
            self.find_sessions(key, earliest_session_end_time, latest_session_start_time)
        )

    def fetch_session(self, key: Any, session_start_time: Time, session_end_time: Time) -> Any:
        """The value of `key`'s session `[session_start_time, session_end_time]`, `None` if
        there is none."""
        _check_key(key)
        start = milliseconds(session_start_time, "session_start_time")
        end = milliseconds(session_end_time, "session_end_time")
        with self._read(
            self._key_partition(key), lambda store: store.fetch_sessions(key, start, start)
        ) as sessions:
            return next((value for window, value in sessions if window.end_ms == end), None)


def _check_key(key: Any) -> None:
    """A session facade reads one key: `None` is none (Kafka refuses a null key too)."""
    if key is None:
        raise ValueError("a session store's key must not be None")


def _backward(sessions: KeyValueIterator[Any, Any]) -> KeyValueIterator[Any, Any]:
    """`sessions` (one key's, read into memory by the store) in reverse."""
    with sessions:
        rows = list(sessions)
    rows.reverse()
    return KeyValueIterator.of_rows(rows)
