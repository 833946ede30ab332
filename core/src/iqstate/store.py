"""The state store contract (KIP-796 queries, KIP-1035 commits and managed offsets).

A store is one partition of a named store. Engines implement it over bytes; the
wrapper layers in `iqstate.layers` implement it too, so a store as the runtime builds
it is a chain of `StateStore`s. Three rules hold for every store:

* writes are visible to reads on the same store at once, and become durable only at
  `commit`, together with the changelog offsets and the position, atomically; a crash
  (or a `close` without `commit`) loses exactly the writes since the last commit;
* `update_position` merges a source position into the store's position; the runtime
  calls it before the writes of a batch, and the position is durable with them;
* `query` answers the query types the store has handlers for and reports the rest as
  `UNKNOWN_QUERY_TYPE`, with the store's position set on every result.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from iqstate.iterators import KeyValueIterator
from iqstate.position import Position, PositionBound, TopicPartition
from iqstate.queries import Query, VersionedRecord, Windowed
from iqstate.results import QueryResult
from iqstate.times import MAX_MS, MIN_MS

if TYPE_CHECKING:
    from iqstate.context import StateStoreContext

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")


class QueryConfig:
    """Per-query options a store needs while answering (whether to collect execution info)."""

    __slots__ = ("collect_execution_info",)

    DEFAULT: ClassVar[QueryConfig]
    WITH_EXECUTION_INFO: ClassVar[QueryConfig]

    def __init__(self, collect_execution_info: bool = False) -> None:
        self.collect_execution_info = collect_execution_info

    def __repr__(self) -> str:
        return f"QueryConfig(collect_execution_info={self.collect_execution_info})"


QueryConfig.DEFAULT = QueryConfig(False)
QueryConfig.WITH_EXECUTION_INFO = QueryConfig(True)

_UNBOUNDED = PositionBound.unbounded()


class StateStore(ABC):
    """One partition of a named store: lifecycle, queries, position and commits."""

    kind: ClassVar[str] = "state_store"
    """The dispatch key of this store class: query handlers are registered per kind."""

    @property
    def atomic_commits(self) -> bool:
        """True iff after a crash at any instant the store's files hold exactly its last commit.

        Such a store is used as it is after a crash (SPEC section 4); a store that cannot
        promise it is rebuilt from its changelog, or refused when it has none. An engine
        claims it with a class attribute `atomic_commits = True`; the conformance suite
        SIGKILLs a writer of every store that claims it.
        """
        return False

    @property
    @abstractmethod
    def name(self) -> str: ...

    @property
    @abstractmethod
    def persistent(self) -> bool: ...

    @abstractmethod
    def init(self, context: StateStoreContext) -> None:
        """Open the store for the partition and directory the context names."""

    @abstractmethod
    def close(self) -> None:
        """Release the store; writes since the last `commit` are discarded."""

    @property
    @abstractmethod
    def is_open(self) -> bool: ...

    def query(
        self,
        query: Query[R],
        position_bound: PositionBound = _UNBOUNDED,
        config: QueryConfig = QueryConfig.DEFAULT,
    ) -> QueryResult[R]:
        """Answer `query`; this default knows no query type."""
        result: QueryResult[R] = QueryResult.for_unknown_query_type(query, self)
        result.position = self.position
        return result

    def query_types(self) -> frozenset[type]:
        """The query types this store answers itself (a layer: not those it passes down)."""
        return frozenset()

    @property
    @abstractmethod
    def position(self) -> Position:
        """The source position the store's data reflects (including uncommitted writes)."""

    @abstractmethod
    def update_position(self, position: Position) -> None:
        """Merge `position` into the store's position; durable at the next `commit`."""

    @abstractmethod
    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        """Make every write since the last commit durable with these offsets and the position.

        Atomic: after a crash the store reopens with data, committed offsets and position
        from one commit. A `None` offset removes that partition's offset; an empty mapping
        removes all offsets. Stores that do not manage offsets ignore them.
        """

    def committed_offset(self, partition: TopicPartition) -> int | None:
        """The changelog offset committed for `partition`, if this store manages offsets."""
        return None

    def prepare_commit(self) -> None:  # noqa: B027 (a hook layers override)
        """Push what a layer buffers down the chain before a commit's offsets are taken
        (a caching layer writes its buffer; Kafka's wrapped stores pass a cache flush down
        the same way). Nothing to do for a store that buffers nothing."""

    @property
    def manages_offsets(self) -> bool:
        """True iff the store keeps changelog offsets and position in its own storage."""
        return False

    def settle(self) -> None:  # noqa: B027 (a hook engines override)
        """The replica was just restored: it caught up with its changelog after applying
        many records. Move what the engine holds in write buffers to its read-optimised
        form, without waiting, so that queries stop paying for it (RocksDB flushes its
        memtables: a restored partition's point lookups then take about 2.2 us instead of
        3.2 us). Never changes what the store holds; nothing to do for an engine that
        buffers nothing."""

    def flush(self) -> None:
        """Deprecated no-op: durability comes from `commit` (KIP-1035)."""
        warnings.warn(
            f"{type(self).__name__}.flush() is deprecated and does nothing; "
            "the runtime makes writes durable with commit(changelog_offsets) (KIP-1035)",
            DeprecationWarning,
            stacklevel=2,
        )


class KeyValueStore(StateStore, Generic[K, V]):
    """A sorted key-value store. Iterators reflect the store as of their creation."""

    @abstractmethod
    def get(self, key: K) -> V | None: ...

    @abstractmethod
    def put(self, key: K, value: V | None) -> None:
        """Set `key` to `value`; a `None` value deletes the key."""

    def put_all(self, entries: Iterable[tuple[K, V | None]]) -> None:
        """Apply many puts (and `None`-valued deletes) in order."""
        for key, value in entries:
            self.put(key, value)

    @abstractmethod
    def delete(self, key: K) -> V | None:
        """Remove `key`; returns the value it had."""

    @abstractmethod
    def range(self, lower: K | None, upper: K | None) -> KeyValueIterator[K, V]:
        """Pairs with `lower <= key <= upper` in ascending key order (`None` = open)."""

    @abstractmethod
    def reverse_range(self, lower: K | None, upper: K | None) -> KeyValueIterator[K, V]:
        """The same pairs as `range`, in descending key order."""

    def all(self) -> KeyValueIterator[K, V]:
        return self.range(None, None)

    def reverse_all(self) -> KeyValueIterator[K, V]:
        return self.reverse_range(None, None)

    def limited_range(
        self, lower: K | None, upper: K | None, limit: int, reverse: bool = False
    ) -> KeyValueIterator[K, V]:
        """At most `limit` pairs of `range` (`reverse_range` when `reverse`), in order.

        This default reads the range and keeps its first `limit` pairs; engines that can
        stop reading early override it."""
        pairs = self.reverse_range(lower, upper) if reverse else self.range(lower, upper)
        with pairs:
            return KeyValueIterator.of_rows(list(islice(pairs, limit)))

    @abstractmethod
    def prefix_scan(self, prefix: K) -> KeyValueIterator[K, V]:
        """Pairs whose serialized key starts with the serialized `prefix`, ascending."""

    @abstractmethod
    def approximate_num_entries(self) -> int: ...


class WindowStore(StateStore, Generic[K, V]):
    """Values per key and fixed-size window, kept for `retention_ms` of stream time."""

    @property
    @abstractmethod
    def window_size_ms(self) -> int: ...

    @property
    @abstractmethod
    def retention_ms(self) -> int: ...

    @abstractmethod
    def put(self, key: K, value: V | None, window_start: int) -> None:
        """Set the value of `key` in the window starting at `window_start`; `None` deletes."""

    @abstractmethod
    def keeps(self, window_start: int) -> bool:
        """Whether a put at `window_start` is kept now (False: with the stream time it
        would set, the window is at or before `stream time - retention_ms` and the put
        drops it, so a change-logging layer must not log it, nor a subscription announce
        it)."""

    def put_all(self, entries: Iterable[tuple[K, int, V | None]]) -> None:
        """Apply many `(key, window_start, value)` puts in order."""
        for key, window_start, value in entries:
            self.put(key, value, window_start)

    def expired_by(self, window_start: int) -> list[tuple[K, int]]:
        """`(key, window_start)` of each window held now that a put at `window_start`
        drops (the stream time it sets passes their start by `retention_ms`): what a
        change-logging layer writes tombstones for, so that compaction removes expired
        windows from the changelog. A store with an index by time overrides this scan."""
        limit = window_start - self.retention_ms
        if limit < MIN_MS:
            return []
        with self.fetch_all(MIN_MS, limit) as windows:
            return [(window.key, window.start_ms) for window, _ in windows]

    @abstractmethod
    def fetch(self, key: K, time_from: int, time_to: int) -> KeyValueIterator[int, V]:
        """`(window_start, value)` of `key` for starts in `[time_from, time_to]`, ascending."""

    @abstractmethod
    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator[Windowed[K], V]:
        """Every key's windows with starts in `[time_from, time_to]`, by key then start."""

    def all(self) -> KeyValueIterator[Windowed[K], V]:
        return self.fetch_all(MIN_MS, MAX_MS)


class VersionedKeyValueStore(StateStore, Generic[K, V]):
    """Versions of each key by timestamp, kept for `history_retention_ms` behind the newest
    timestamp seen (Kafka's KIP-889). A put at an existing timestamp replaces that version;
    a `None` value is a tombstone version."""

    @property
    @abstractmethod
    def history_retention_ms(self) -> int: ...

    @abstractmethod
    def put(self, key: K, value: V | None, timestamp: int) -> None:
        """Insert the version of `key` valid from `timestamp` (`None`: a tombstone)."""

    @abstractmethod
    def keeps(self, timestamp: int) -> bool:
        """Whether a put at `timestamp` is kept now (False: it is older than the retention
        and a put drops it, so a change-logging layer must not log it, nor a subscription
        announce it)."""

    def put_all(self, entries: Iterable[tuple[K, int, V | None]]) -> None:
        """Apply many `(key, timestamp, value)` puts in order."""
        for key, timestamp, value in entries:
            self.put(key, value, timestamp)

    def expired_by(self, timestamp: int) -> list[tuple[K, int]]:
        """`(key, timestamp)` of versions held now that a put at `timestamp` drops (older
        versions that stopped being valid before the retention it sets, every version of a
        key whose current one is a tombstone from before it), each older than the oldest
        time a put is still kept at (so no later put can write that key again): what an
        active replica writes tombstones for, so that compaction removes them from the
        changelog, after later records, at the end of the log. A store that
        does not override this names none, and its expired versions stay in the changelog;
        the conformance suite expects it answered."""
        return []

    def held_timestamps(self, key: K) -> list[int]:
        """The timestamps of the versions of `key` held, tombstones included, oldest first:
        what a put may cut short. This default cannot see tombstones among the older
        versions (`versions` leaves them out); the core's store can."""
        stamps = [record.timestamp for record in self.versions(key, None, None, True)]
        latest = self.latest_version(key)
        if latest is not None and (not stamps or stamps[-1] != latest[0]):
            stamps.append(latest[0])
        return stamps

    def holds_version(self, key: K, timestamp: int) -> bool:
        """Whether a version of `key` at exactly `timestamp`, a value or a tombstone, is
        held: a tombstone is written to the changelog only for a version that is not (its
        record shares the key `key + timestamp`). This default cannot see tombstones among
        the older versions and answers True when it cannot tell; the core's store knows."""
        latest = self.latest_version(key)
        if latest is None:
            return False
        if latest[0] <= timestamp:
            return latest[0] == timestamp
        return True  # an older version's, maybe a tombstone's, which `versions` leaves out

    def current_in_range(self, lower: K | None, upper: K | None) -> list[tuple[K, int, V | None]]:
        """`(key, timestamp, value)` of the current version of each key in `[lower, upper]`
        (`None` = open), by key, a tombstone's value `None`: what a subscription's snapshot
        holds, so that a later put older than a key's tombstone is not taken for its
        current value. This default cannot see deleted keys (`range_as_of` leaves them
        out); the core's store can."""
        with self.range_as_of(lower, upper, None) as current:
            return [(key, record.timestamp, record.value) for key, record in current]

    @abstractmethod
    def get(self, key: K, as_of: int | None = None) -> VersionedRecord[V] | None:
        """The version valid at `as_of` (the current one for `None`), or `None` when there
        is none, it is a tombstone, or `as_of` is before the retained history."""

    @abstractmethod
    def latest_version(self, key: K) -> tuple[int, V | None] | None:
        """The newest version's timestamp and value (`None` for a tombstone), or `None`."""

    @abstractmethod
    def versions(
        self, key: K, time_from: int | None, time_to: int | None, ascending: bool
    ) -> list[VersionedRecord[V]]:
        """The versions valid at some instant of `[time_from, time_to]` (`None` = open),
        tombstones left out, by timestamp."""

    @abstractmethod
    def range_as_of(
        self, lower: K | None, upper: K | None, as_of: int | None, limit: int | None = None
    ) -> KeyValueIterator[K, VersionedRecord[V]]:
        """Each key in `[lower, upper]` with its version valid at `as_of`, by key (the
        first `limit` of them when it is set: a page reads no more than it returns)."""


class SessionStore(StateStore, Generic[K, V]):
    """Values per key and session `[start_ms, end_ms]`, kept until their end is
    `retention_ms` behind the newest session end seen."""

    @property
    @abstractmethod
    def retention_ms(self) -> int: ...

    @abstractmethod
    def put(self, key: K, value: V | None, start_ms: int, end_ms: int) -> None:
        """Set the value of `key`'s session `[start_ms, end_ms]`; `None` removes it."""

    @abstractmethod
    def keeps(self, end_ms: int) -> bool:
        """Whether a put of a session ending at `end_ms` is kept now (False: with the
        stream time it would set, the session ended at or before `stream time -
        retention_ms` and the put drops it, so a change-logging layer must not log it, nor
        a subscription announce it)."""

    def put_all(self, entries: Iterable[tuple[K, int, int, V | None]]) -> None:
        """Apply many `(key, start_ms, end_ms, value)` puts in order."""
        for key, start_ms, end_ms, value in entries:
            self.put(key, value, start_ms, end_ms)

    def expired_by(self, end_ms: int) -> list[tuple[K, int, int]]:
        """`(key, start_ms, end_ms)` of each session held now that a put of a session
        ending at `end_ms` drops (the stream time it sets passes their end by
        `retention_ms`): what a change-logging layer writes tombstones for. A store with an
        index by end overrides this scan of every session."""
        limit = end_ms - self.retention_ms
        if limit < MIN_MS:
            return []
        with self.fetch_sessions(None, MIN_MS, limit) as sessions:
            return [
                (session.key, session.start_ms, session.end_ms)
                for session, _ in sessions
                if session.end_ms <= limit
            ]

    @abstractmethod
    def fetch_sessions(
        self, key: K | None, time_from: int, time_to: int
    ) -> KeyValueIterator[Windowed[K], V]:
        """Sessions starting in `[time_from, time_to]`, of `key` (every key's for `None`),
        by key, then start, then end."""
