"""Handles given to code outside the runtime.

* `ReadOnlyKeyValueView` / `ReadOnlyWindowView`: reads and queries only, for callers
  that query state (IQv1 facades build on these).
* `KeyValueWriteHandle` / `WindowWriteHandle`: what pipeline code writes through. It may
  read and write, but only the runtime commits: `commit` raises, `flush` is the
  deprecated no-op, and lifecycle calls are refused.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any, Generic, NoReturn, TypeVar

from iqstate.errors import UnsupportedOperationError
from iqstate.iterators import KeyValueIterator
from iqstate.position import Position, PositionBound
from iqstate.queries import Query, Windowed
from iqstate.results import QueryResult
from iqstate.store import KeyValueStore, QueryConfig, StateStore, WindowStore

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")
S = TypeVar("S", bound=StateStore)

_UNBOUNDED = PositionBound.unbounded()


class _Facade(Generic[S]):
    __slots__ = ("_store",)

    def __init__(self, store: S) -> None:
        self._store = store

    @property
    def name(self) -> str:
        return self._store.name

    @property
    def position(self) -> Position:
        return self._store.position

    def _refuse(self, operation: str, why: str) -> NoReturn:
        raise UnsupportedOperationError(
            f"{operation} is not allowed on this handle of store {self._store.name!r}: {why}"
        )


class _ReadOnly(_Facade[S]):
    __slots__ = ()

    def query(
        self,
        query: Query[R],
        position_bound: PositionBound = _UNBOUNDED,
        config: QueryConfig = QueryConfig.DEFAULT,
    ) -> QueryResult[R]:
        return self._store.query(query, position_bound, config)

    def put(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("put", "it is read-only")

    def put_all(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("put_all", "it is read-only")

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("delete", "it is read-only")

    def commit(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("commit", "it is read-only")


class ReadOnlyKeyValueView(_ReadOnly[KeyValueStore[K, V]], Generic[K, V]):
    """Reads and queries of a key-value store, and nothing else."""

    __slots__ = ()

    def get(self, key: K) -> V | None:
        return self._store.get(key)

    def range(self, lower: K | None, upper: K | None) -> KeyValueIterator[K, V]:
        return self._store.range(lower, upper)

    def reverse_range(self, lower: K | None, upper: K | None) -> KeyValueIterator[K, V]:
        return self._store.reverse_range(lower, upper)

    def all(self) -> KeyValueIterator[K, V]:
        return self._store.all()

    def reverse_all(self) -> KeyValueIterator[K, V]:
        return self._store.reverse_all()

    def prefix_scan(self, prefix: K) -> KeyValueIterator[K, V]:
        return self._store.prefix_scan(prefix)

    def approximate_num_entries(self) -> int:
        return self._store.approximate_num_entries()


class ReadOnlyWindowView(_ReadOnly[WindowStore[K, V]], Generic[K, V]):
    """Reads and queries of a window store, and nothing else."""

    __slots__ = ()

    def fetch(self, key: K, time_from: int, time_to: int) -> KeyValueIterator[int, V]:
        return self._store.fetch(key, time_from, time_to)

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator[Windowed[K], V]:
        return self._store.fetch_all(time_from, time_to)

    def all(self) -> KeyValueIterator[Windowed[K], V]:
        return self._store.all()


class _WriteHandle(_Facade[S]):
    __slots__ = ()

    def commit(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("commit", "only the runtime commits, when a batch completes")

    def close(self) -> NoReturn:
        self._refuse("close", "the runtime owns the store's lifecycle")

    def init(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("init", "the runtime owns the store's lifecycle")

    def flush(self) -> None:
        """Deprecated no-op (KIP-1035): the runtime commits."""
        warnings.warn(
            "flush() is deprecated and does nothing; the runtime commits your writes",
            DeprecationWarning,
            stacklevel=2,
        )


class KeyValueWriteHandle(_WriteHandle[KeyValueStore[K, V]], Generic[K, V]):
    """What pipeline code reads and writes a key-value store through."""

    __slots__ = ()

    def get(self, key: K) -> V | None:
        return self._store.get(key)

    def put(self, key: K, value: V | None) -> None:
        self._store.put(key, value)

    def put_all(self, entries: Iterable[tuple[K, V | None]]) -> None:
        self._store.put_all(entries)

    def delete(self, key: K) -> V | None:
        return self._store.delete(key)

    def range(self, lower: K | None, upper: K | None) -> KeyValueIterator[K, V]:
        return self._store.range(lower, upper)

    def all(self) -> KeyValueIterator[K, V]:
        return self._store.all()


class WindowWriteHandle(_WriteHandle[WindowStore[K, V]], Generic[K, V]):
    """What pipeline code reads and writes a window store through."""

    __slots__ = ()

    def put(self, key: K, value: V | None, window_start: int) -> None:
        self._store.put(key, value, window_start)

    def fetch(self, key: K, time_from: int, time_to: int) -> KeyValueIterator[int, V]:
        return self._store.fetch(key, time_from, time_to)
