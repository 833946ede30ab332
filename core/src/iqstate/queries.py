"""Query types: immutable value objects that name what to read from a store.

A query is answered by whichever layer of a store chain has a handler for its type
(see `iqstate.dispatch`); the built-in types here are answered by every built-in
engine. The same classes carry typed keys above the metered layer and bytes below it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from iqstate.iterators import KeyValueIterator, VersionedRecordIterator
from iqstate.slotted import slot_constructor
from iqstate.times import MAX_MS, MIN_MS, Time, milliseconds, stored_ms

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")


_SLOT_NAMES: dict[type, tuple[str, ...]] = {}


def _slot_names(cls: type) -> tuple[str, ...]:
    """Every slot a query class declares, base classes first (computed once per class)."""
    names = _SLOT_NAMES.get(cls)
    if names is None:
        collected: list[str] = []
        for klass in reversed(cls.__mro__):
            slots = klass.__dict__.get("__slots__", ())
            collected.extend([slots] if isinstance(slots, str) else slots)
        names = _SLOT_NAMES[cls] = tuple(collected)
    return names


class Query(Generic[R]):
    """Base class of every query; `R` is the type of a successful result.

    Subclasses list their fields in `__slots__`; equality, hashing and `repr` come from
    those fields, and instances refuse attribute assignment once built.
    """

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, slot) for slot in _slot_names(type(self)))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((type(self), self._fields()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{slot}={getattr(self, slot)!r}" for slot in _slot_names(type(self)))
        return f"{type(self).__name__}({fields})"

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (_rebuild_query, (type(self), self._fields()))


def _rebuild_query(cls: type[Query[Any]], fields: tuple[object, ...]) -> Query[Any]:
    instance = object.__new__(cls)
    for slot, value in zip(_slot_names(cls), fields, strict=True):
        object.__setattr__(instance, slot, value)
    return instance


_set = object.__setattr__


class KeyQuery(Query[V | None], Generic[K, V]):
    """The value of one key, or `None` when the key is absent."""

    __slots__ = ("key", "is_skip_cache")

    key: K
    is_skip_cache: bool

    def __init__(self, key: K, skip_cache: bool = False) -> None:
        if key is None:
            raise ValueError("KeyQuery: the key must not be None")
        _set(self, "key", key)
        _set(self, "is_skip_cache", skip_cache)

    @classmethod
    def with_key(cls, key: K) -> KeyQuery[K, V]:
        if cls is not KeyQuery or key is None:
            return cls(key)  # a subclass's own __init__; None is refused there
        return _key_query(key)  # one per lookup: no __init__ frame

    def skip_cache(self) -> KeyQuery[K, V]:
        """The same query, answered from the store beneath the cache."""
        return KeyQuery(self.key, True)


key_query_of: Callable[[Any, bool], KeyQuery[Any, Any]] = slot_constructor(
    KeyQuery, ("key", "is_skip_cache")
)
"""`key_query_of(key, skip_cache)`: a `KeyQuery` without the argument checks, for layers
re-keying a checked query."""
_key_query: Callable[[Any], KeyQuery[Any, Any]] = slot_constructor(
    KeyQuery, ("key",), {"is_skip_cache": False}
)
"""`_key_query(key)`: `with_key`'s query once it has checked the key."""


class ResultOrder(enum.Enum):
    """Key order of a range result within a partition; `ANY` is answered ascending."""

    ANY = "any"
    ASCENDING = "ascending"
    DESCENDING = "descending"


class RangeQuery(Query[KeyValueIterator[K, V]], Generic[K, V]):
    """The pairs whose keys lie between two inclusive bounds (`None` = open)."""

    __slots__ = ("lower_bound", "upper_bound", "result_order")

    lower_bound: K | None
    upper_bound: K | None
    result_order: ResultOrder

    def __init__(
        self,
        lower_bound: K | None = None,
        upper_bound: K | None = None,
        result_order: ResultOrder = ResultOrder.ANY,
    ) -> None:
        if not isinstance(result_order, ResultOrder):
            raise TypeError(f"RangeQuery: result_order must be a ResultOrder, got {result_order!r}")
        _set(self, "lower_bound", lower_bound)
        _set(self, "upper_bound", upper_bound)
        _set(self, "result_order", result_order)

    @classmethod
    def with_range(cls, lower: K | None, upper: K | None) -> Self:
        return cls(lower, upper)

    @classmethod
    def with_lower_bound(cls, lower: K) -> Self:
        if lower is None:
            raise ValueError("RangeQuery.with_lower_bound: the bound must not be None")
        return cls(lower, None)

    @classmethod
    def with_upper_bound(cls, upper: K) -> Self:
        if upper is None:
            raise ValueError("RangeQuery.with_upper_bound: the bound must not be None")
        return cls(None, upper)

    @classmethod
    def with_no_bounds(cls) -> Self:
        return cls()

    def with_descending_keys(self) -> Self:
        return type(self)(self.lower_bound, self.upper_bound, ResultOrder.DESCENDING)

    def with_ascending_keys(self) -> Self:
        return type(self)(self.lower_bound, self.upper_bound, ResultOrder.ASCENDING)

    @property
    def is_descending(self) -> bool:
        return self.result_order is ResultOrder.DESCENDING


class LimitedRangeQuery(Query[KeyValueIterator[K, V]], Generic[K, V]):
    """At most `limit` pairs of a range (inclusive bounds, `None` = open), in key order
    (descending when asked): a reader that pages through a range reads one page's worth
    of it, not all of it (the HTTP service's merged pages)."""

    __slots__ = ("lower_bound", "upper_bound", "descending", "limit")

    lower_bound: K | None
    upper_bound: K | None
    descending: bool
    limit: int

    def __init__(
        self, lower_bound: K | None, upper_bound: K | None, descending: bool, limit: int
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"LimitedRangeQuery: limit must be an int >= 1, got {limit!r}")
        _set(self, "lower_bound", lower_bound)
        _set(self, "upper_bound", upper_bound)
        _set(self, "descending", bool(descending))
        _set(self, "limit", limit)

    @classmethod
    def of(cls, query: RangeQuery[K, V], limit: int) -> LimitedRangeQuery[K, V]:
        """The first `limit` pairs `query` answers."""
        return cls(query.lower_bound, query.upper_bound, query.is_descending, limit)


@dataclass(frozen=True, order=True, slots=True)
class Windowed(Generic[K]):
    """A key in one window: `[start_ms, end_ms)`."""

    key: K
    start_ms: int
    end_ms: int


def window_end(start_ms: int, size_ms: int) -> int:
    """Where the window of `size_ms` from `start_ms` ends: at `MAX_MS` when it would end
    past it, as Kafka's window key schema truncates an end that overflows a long."""
    end = start_ms + size_ms
    return end if end <= MAX_MS else MAX_MS


class WindowKeyQuery(Query[KeyValueIterator[int, V]], Generic[K, V]):
    """The windows of one key whose start lies in `[time_from, time_to]`, as `(start_ms, value)`."""

    __slots__ = ("key", "time_from", "time_to")

    key: K
    time_from: int
    time_to: int

    def __init__(self, key: K, time_from: Time, time_to: Time) -> None:
        if key is None:
            raise ValueError("WindowKeyQuery: the key must not be None")
        _set(self, "key", key)
        _set(self, "time_from", milliseconds(time_from, "WindowKeyQuery: time_from"))
        _set(self, "time_to", milliseconds(time_to, "WindowKeyQuery: time_to"))

    @classmethod
    def with_key_and_window_start_range(
        cls, key: K, time_from: Time, time_to: Time
    ) -> WindowKeyQuery[K, V]:
        return cls(key, time_from, time_to)


class WindowRangeQuery(Query[KeyValueIterator[Windowed[K], V]], Generic[K, V]):
    """Windows whose start lies in `[time_from, time_to]`: every key's, or with `key` set
    (`with_key`, Kafka's KIP-806 way of asking a session store) that key's only."""

    __slots__ = ("time_from", "time_to", "key")

    time_from: int
    time_to: int
    key: K | None

    def __init__(self, time_from: Time, time_to: Time, key: K | None = None) -> None:
        _set(self, "time_from", milliseconds(time_from, "WindowRangeQuery: time_from"))
        _set(self, "time_to", milliseconds(time_to, "WindowRangeQuery: time_to"))
        _set(self, "key", key)

    @classmethod
    def with_window_start_range(cls, time_from: Time, time_to: Time) -> WindowRangeQuery[K, V]:
        return cls(time_from, time_to)

    @classmethod
    def with_key(cls, key: K) -> WindowRangeQuery[K, V]:
        """Every window (every session, on a session store) of `key`, ordered by start."""
        if key is None:
            raise ValueError("WindowRangeQuery.with_key: the key must not be None")
        return cls(MIN_MS, MAX_MS, key)


@dataclass(frozen=True, slots=True)
class ValueAndTimestamp(Generic[V]):
    """A value of a timestamped store with the timestamp it was put with (ms)."""

    value: V
    timestamp: int


@dataclass(frozen=True, slots=True)
class VersionedRecord(Generic[V]):
    """One version of a key in a versioned store: valid from `timestamp` (inclusive) to
    `valid_to` (exclusive; `None` while it is the current version)."""

    value: V
    timestamp: int
    valid_to: int | None = None


def _timestamp(query: str, label: str, value: Time | None) -> int | None:
    """A time of `query`, or None: ms, or an aware `datetime` turned into ms."""
    return None if value is None else milliseconds(value, "{}: {}", query, label)


def _as_of(query: str, value: Time | None) -> int | None:
    """An `as_of` instant: ms in the signed 64-bit range stores keep times in (a bound of a
    time range may lie beyond it, an instant to look up may not)."""
    return None if value is None else stored_ms(value, "{}: as_of", query)


def _as_of_given(query: str, value: Time | None) -> Time:
    """The instant `as_of(value)` names: None is refused, as Kafka refuses a null `asOf`
    (a query without `as_of` asks for the current version)."""
    if value is None:
        raise ValueError(
            f"{query}.as_of: the timestamp must not be None (leave as_of out to ask for the "
            "current version)"
        )
    return value


class TimestampedKeyQuery(Query[ValueAndTimestamp[V] | None], Generic[K, V]):
    """The value of one key of a timestamped store with its timestamp (KIP-992), or `None`."""

    __slots__ = ("key", "is_skip_cache")

    key: K
    is_skip_cache: bool

    def __init__(self, key: K, skip_cache: bool = False) -> None:
        if key is None:
            raise ValueError("TimestampedKeyQuery: the key must not be None")
        _set(self, "key", key)
        _set(self, "is_skip_cache", skip_cache)

    @classmethod
    def with_key(cls, key: K) -> TimestampedKeyQuery[K, V]:
        return cls(key)

    def skip_cache(self) -> TimestampedKeyQuery[K, V]:
        """The same query, answered from the store beneath the cache."""
        return TimestampedKeyQuery(self.key, True)


class TimestampedRangeQuery(RangeQuery[K, ValueAndTimestamp[V]]):
    """A `RangeQuery` of a timestamped store whose values carry their timestamps (KIP-992):
    pairs of `(key, ValueAndTimestamp)`, with `RangeQuery`'s factories and orders."""

    __slots__ = ()


class LimitedTimestampedRangeQuery(LimitedRangeQuery[K, ValueAndTimestamp[V]]):
    """At most `limit` pairs `(key, ValueAndTimestamp)` of a timestamped store's range, in
    key order: a page of a `TimestampedRangeQuery` (`LimitedRangeQuery` answers a
    timestamped store's plain values, as `RangeQuery` does)."""

    __slots__ = ()


class VersionedKeyQuery(Query[VersionedRecord[V] | None], Generic[K, V]):
    """One key of a versioned store (KIP-960): its current version, or with `as_of(ts)` the
    version valid at `ts`; `None` when there is none (or none the retention can prove)."""

    __slots__ = ("key", "as_of_timestamp")

    key: K
    as_of_timestamp: int | None

    def __init__(self, key: K, as_of_timestamp: Time | None = None) -> None:
        if key is None:
            raise ValueError("VersionedKeyQuery: the key must not be None")
        _set(self, "key", key)
        _set(self, "as_of_timestamp", _as_of("VersionedKeyQuery", as_of_timestamp))

    @classmethod
    def with_key(cls, key: K) -> VersionedKeyQuery[K, V]:
        return cls(key)

    def as_of(self, timestamp: Time) -> VersionedKeyQuery[K, V]:
        return VersionedKeyQuery(self.key, _as_of_given("VersionedKeyQuery", timestamp))


class MultiVersionedKeyQuery(Query[VersionedRecordIterator[V]], Generic[K, V]):
    """Every version of one key valid at some instant of `[from_time, to_time]` (KIP-968),
    tombstones left out, newest first unless `with_ascending_timestamps()`."""

    __slots__ = ("key", "from_timestamp", "to_timestamp", "ascending")

    key: K
    from_timestamp: int | None
    to_timestamp: int | None
    ascending: bool

    def __init__(
        self,
        key: K,
        from_timestamp: Time | None = None,
        to_timestamp: Time | None = None,
        ascending: bool = False,
    ) -> None:
        if key is None:
            raise ValueError("MultiVersionedKeyQuery: the key must not be None")
        from_timestamp = _timestamp("MultiVersionedKeyQuery", "from_time", from_timestamp)
        to_timestamp = _timestamp("MultiVersionedKeyQuery", "to_time", to_timestamp)
        if (
            from_timestamp is not None
            and to_timestamp is not None
            and from_timestamp > to_timestamp
        ):
            raise ValueError(
                f"MultiVersionedKeyQuery: from_time ({from_timestamp}) is after to_time "
                f"({to_timestamp})"
            )
        _set(self, "key", key)
        _set(self, "from_timestamp", from_timestamp)
        _set(self, "to_timestamp", to_timestamp)
        _set(self, "ascending", bool(ascending))

    @classmethod
    def with_key(cls, key: K) -> MultiVersionedKeyQuery[K, V]:
        return cls(key)

    def from_time(self, timestamp: Time) -> MultiVersionedKeyQuery[K, V]:
        return MultiVersionedKeyQuery(self.key, timestamp, self.to_timestamp, self.ascending)

    def to_time(self, timestamp: Time) -> MultiVersionedKeyQuery[K, V]:
        return MultiVersionedKeyQuery(self.key, self.from_timestamp, timestamp, self.ascending)

    def with_ascending_timestamps(self) -> MultiVersionedKeyQuery[K, V]:
        return MultiVersionedKeyQuery(self.key, self.from_timestamp, self.to_timestamp, True)

    def with_descending_timestamps(self) -> MultiVersionedKeyQuery[K, V]:
        return MultiVersionedKeyQuery(self.key, self.from_timestamp, self.to_timestamp, False)


class VersionedRangeQuery(Query[KeyValueIterator[K, VersionedRecord[V]]], Generic[K, V]):
    """Every key between two inclusive bounds with its version valid at `as_of(ts)` (the
    current one without it), ordered by key: the as-of range scan Kafka proposed in KIP-969
    and never shipped. Keys with no version valid then are left out."""

    __slots__ = ("lower_bound", "upper_bound", "as_of_timestamp")

    lower_bound: K | None
    upper_bound: K | None
    as_of_timestamp: int | None

    def __init__(
        self,
        lower_bound: K | None = None,
        upper_bound: K | None = None,
        as_of_timestamp: Time | None = None,
    ) -> None:
        _set(self, "lower_bound", lower_bound)
        _set(self, "upper_bound", upper_bound)
        _set(self, "as_of_timestamp", _as_of("VersionedRangeQuery", as_of_timestamp))

    @classmethod
    def with_range(cls, lower: K | None, upper: K | None) -> VersionedRangeQuery[K, V]:
        return cls(lower, upper)

    @classmethod
    def with_lower_bound(cls, lower: K) -> VersionedRangeQuery[K, V]:
        return cls(lower, None)

    @classmethod
    def with_upper_bound(cls, upper: K) -> VersionedRangeQuery[K, V]:
        return cls(None, upper)

    @classmethod
    def with_no_bounds(cls) -> VersionedRangeQuery[K, V]:
        return cls()

    def as_of(self, timestamp: Time) -> VersionedRangeQuery[K, V]:
        return VersionedRangeQuery(
            self.lower_bound, self.upper_bound, _as_of_given("VersionedRangeQuery", timestamp)
        )

    @property
    def is_descending(self) -> bool:
        """Always False: the keys come in ascending order."""
        return False


class LimitedVersionedRangeQuery(Query[KeyValueIterator[K, VersionedRecord[V]]], Generic[K, V]):
    """At most `limit` pairs of a `VersionedRangeQuery`, in key order: a reader that pages
    through an as-of range reads one page's worth of it, not all of it."""

    __slots__ = ("lower_bound", "upper_bound", "as_of_timestamp", "limit")

    lower_bound: K | None
    upper_bound: K | None
    as_of_timestamp: int | None
    limit: int

    def __init__(
        self,
        lower_bound: K | None,
        upper_bound: K | None,
        as_of_timestamp: Time | None,
        limit: int,
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(
                f"LimitedVersionedRangeQuery: limit must be an int >= 1, got {limit!r}"
            )
        _set(self, "lower_bound", lower_bound)
        _set(self, "upper_bound", upper_bound)
        _set(self, "as_of_timestamp", _as_of("LimitedVersionedRangeQuery", as_of_timestamp))
        _set(self, "limit", limit)

    @classmethod
    def of(cls, query: VersionedRangeQuery[K, V], limit: int) -> LimitedVersionedRangeQuery[K, V]:
        """The first `limit` pairs `query` answers."""
        return cls(query.lower_bound, query.upper_bound, query.as_of_timestamp, limit)


BUILTIN_QUERY_TYPES: tuple[type[Query[Any]], ...] = (
    KeyQuery,
    RangeQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
"""The query types every built-in engine answers."""

__all__ = [
    "BUILTIN_QUERY_TYPES",
    "KeyQuery",
    "LimitedTimestampedRangeQuery",
    "LimitedVersionedRangeQuery",
    "MultiVersionedKeyQuery",
    "Query",
    "RangeQuery",
    "ResultOrder",
    "TimestampedKeyQuery",
    "TimestampedRangeQuery",
    "ValueAndTimestamp",
    "VersionedKeyQuery",
    "VersionedRangeQuery",
    "VersionedRecord",
    "WindowKeyQuery",
    "WindowRangeQuery",
    "Windowed",
]
