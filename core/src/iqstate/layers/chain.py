"""A store partition's chain: metered -> caching (optional) -> change-logging (optional) ->
engine, assembled here and handed to the runtime as one `StoreChain`.

The chain is the only thing the runtime talks to for a store partition: it runs queries,
the key lookup, writes of serialized entries, restores from a changelog, prepares and makes
commits, and closes. Which form the key lookup takes is decided here, once, when the chain
is initialised: fused (the engine's `get` read directly, one call) when the layers and the
engine declare that a `KeyQuery` means exactly that, the general layered query otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from iqstate.context import StateStoreContext
from iqstate.engine_store import EngineStore
from iqstate.expiring_versions import expired_now, versions_expiring
from iqstate.iterators import KeyValueIterator
from iqstate.kept_puts import expired_by_records, kept_sessions, kept_versions, kept_windows
from iqstate.keyspace import decode_window_key, encode_window_key
from iqstate.layers.caching import DEFAULT_CACHE_ENTRIES, CachingKeyValueStore
from iqstate.layers.changelogging import (
    ChangeLoggingKeyValueStore,
    ChangeLoggingSessionStore,
    ChangeLoggingVersionedStore,
    ChangeLoggingWindowStore,
)
from iqstate.layers.metered import MeteredKeyValueStore, MeteredWindowStore
from iqstate.layers.metered_types import (
    MeteredSessionStore,
    MeteredTimestampedKeyValueStore,
    MeteredVersionedStore,
)
from iqstate.layers.wrapped import WrappedStore
from iqstate.metrics import StoreMetrics
from iqstate.position import Position, PositionBound, TopicPartition
from iqstate.queries import (
    KeyQuery,
    LimitedVersionedRangeQuery,
    Query,
    VersionedKeyQuery,
    VersionedRangeQuery,
)
from iqstate.results import FailureReason, QueryResult, success_of
from iqstate.serdes import BytesSerde, Serde
from iqstate.session_store import decode_session_key, encode_session_key
from iqstate.store import (
    KeyValueStore,
    QueryConfig,
    SessionStore,
    StateStore,
    VersionedKeyValueStore,
    WindowStore,
)
from iqstate.version_selection import versioned_record, versioned_rows
from iqstate.versioned_store import (
    LayeredVersionedStore,
    decode_version_record,
    split_version_key,
    version_key,
)

K = TypeVar("K")
V = TypeVar("V")
R = TypeVar("R")
Top = TypeVar(
    "Top",
    MeteredKeyValueStore[Any, Any],
    MeteredWindowStore[Any, Any],
    MeteredVersionedStore[Any, Any],
    MeteredSessionStore[Any, Any],
)

_UNBOUNDED = PositionBound.unbounded()
_UNKNOWN_QUERY_TYPE = FailureReason.UNKNOWN_QUERY_TYPE
_VERSIONED_RANGES = (VersionedRangeQuery, LimitedVersionedRangeQuery)


def build_key_value_chain(
    engine_store: KeyValueStore[bytes, bytes],
    key_serde: Serde[K],
    value_serde: Serde[V],
    *,
    caching: bool | int = False,
    logging: bool = False,
    timestamped: bool = False,
) -> MeteredKeyValueStore[K, Any]:
    """Wrap an engine's key-value store; `caching` may be the buffer size in entries;
    `timestamped` makes the top a `MeteredTimestampedKeyValueStore`."""
    store: KeyValueStore[bytes, bytes] = engine_store
    if logging:
        store = ChangeLoggingKeyValueStore(store)
    if caching:
        size = DEFAULT_CACHE_ENTRIES if caching is True else int(caching)
        store = CachingKeyValueStore(store, size)
    if timestamped:
        return MeteredTimestampedKeyValueStore(store, key_serde, value_serde)
    return MeteredKeyValueStore(store, key_serde, value_serde)


def build_window_chain(
    engine_store: WindowStore[bytes, bytes],
    key_serde: Serde[K],
    value_serde: Serde[V],
    *,
    logging: bool = False,
) -> MeteredWindowStore[K, V]:
    """Wrap an engine's window store (window stores have no caching layer)."""
    store: WindowStore[bytes, bytes] = engine_store
    if logging:
        store = ChangeLoggingWindowStore(store)
    return MeteredWindowStore(store, key_serde, value_serde)


def _layers_between(top: WrappedStore[Any]) -> tuple[list[WrappedStore[Any]], StateStore]:
    """The layers beneath `top` and the engine at the bottom."""
    layers: list[WrappedStore[Any]] = []
    store: StateStore = top.wrapped
    while isinstance(store, WrappedStore):
        layers.append(store)
        store = store.wrapped
    return layers, store


class StoreChain(ABC, Generic[Top]):
    """One store partition as the runtime sees it; build with `key_value_chain` or
    `window_chain`. `typed` is the top of the chain, for typed reads (IQv1)."""

    def __init__(self, top: Top) -> None:
        self.typed: Top = top
        self._between, self.engine = _layers_between(top)
        self.key_lookup = self._layered_key_lookup
        """`key_lookup(query, key_bytes, bound, config)`: a `KeyQuery` whose key is already
        serialized with the store's key serde; fused or layered, chosen at `init`."""

    # -- lifecycle ---------------------------------------------------------------------------

    def init(self, context: StateStoreContext) -> None:
        self.typed.init(context)
        if self._can_fuse_key_lookup():
            # `Serdes.bytes()` decodes an engine's bytes to themselves: nothing to call.
            # Otherwise the serde's quick deserializer: where it raises, the fused lookup
            # takes the layered path, which reports the serde's own error.
            serde = self.typed.value_serde
            identity = type(serde) is BytesSerde
            self._deserialize_value = None if identity else serde.quick_deserializer()
            self.key_lookup = self._fused_key_lookup

    def close(self) -> None:
        self.typed.close()

    @property
    def persistent(self) -> bool:
        return self.typed.persistent

    @property
    def manages_offsets(self) -> bool:
        return self.typed.manages_offsets

    @property
    def metrics(self) -> StoreMetrics:
        return self.typed.metrics

    # -- reading -------------------------------------------------------------------------------

    def query(self, query: Query[R], bound: PositionBound, config: QueryConfig) -> QueryResult[R]:
        result = self.typed.query(query, bound, config)
        if result.is_success or result.failure_reason is not _UNKNOWN_QUERY_TYPE:
            return result
        return self._unknown(query, result)

    def _unknown(self, query: Query[R], failed: QueryResult[R]) -> QueryResult[R]:
        """The failure for a query no layer answers, naming the store as the caller sees it
        (its top layer) and the engine's kind beneath (the kind a plugin registers an
        engine's own handlers for), and every query type one of its layers answers (the
        engine, which failed it, knows only its own); with the layers' execution info."""
        beneath = set(self.engine.query_types())
        for layer in self._between:
            beneath.update(layer.query_types())
        top = self.typed
        answered = set(top.query_types()) | {kind for kind in beneath if top.passes_down(kind)}
        result: QueryResult[R] = QueryResult.for_unknown_query_type(
            query, self.typed, answered, self.engine
        )
        result.position = failed.position
        for entry in failed.execution_info:
            result.add_execution_info(entry)
        return result

    def _can_fuse_key_lookup(self) -> bool:
        engine = self.engine
        return (
            isinstance(engine, EngineStore)
            and engine.key_query_is_get
            and self.typed.handles(KeyQuery)
            and not any(layer.handles(KeyQuery) for layer in self._between)
        )

    def _layered_key_lookup(
        self, query: KeyQuery[Any, Any], key_bytes: bytes, bound: PositionBound, config: QueryConfig
    ) -> QueryResult[Any]:
        return self.typed.query(query, bound, config)

    def _fused_position(self, bound: PositionBound, config: QueryConfig) -> Position | None:
        """The engine's position when a fused read may answer (no execution info asked, the
        bound reached); None when the layered path must."""
        if config.collect_execution_info:
            return None
        engine: Any = self.engine
        position: Position = engine.current_position
        if bound is not _UNBOUNDED and not position.dominates(bound.position):
            return None
        return position

    def _fused_key_lookup(
        self, query: KeyQuery[Any, Any], key_bytes: bytes, bound: PositionBound, config: QueryConfig
    ) -> QueryResult[Any]:
        # The layers answer a KeyQuery with the engine's value at its position; so does this,
        # in one call. Anything unusual (execution info, a bound not reached, an exception)
        # takes the layered path, so every answer is the one the layers give. (The check
        # is `_fused_position`'s, written out: a call costs this, the hottest path, ~3%.)
        if config.collect_execution_info:
            return self.typed.query(query, bound, config)
        engine: Any = self.engine
        position = engine.current_position
        if bound is not _UNBOUNDED and not position.dominates(bound.position):
            return self.typed.query(query, bound, config)
        try:
            value = engine.get(key_bytes)
            deserialize = self._deserialize_value
            if value is not None and deserialize is not None:
                value = deserialize(value)
        except Exception:
            return self.typed.query(query, bound, config)
        return success_of(value, position)

    # -- writing and committing -----------------------------------------------------------------

    @abstractmethod
    def write(self, entries: list[Any]) -> None:
        """Write serialized entries through the whole chain (a batch's writes)."""

    def kept_entries(self, entries: list[Any]) -> list[bool] | None:
        """For a batch's entries about to be written, whether the store keeps each; None
        when it keeps them all (its retention drops none): what a subscription announces."""
        return None

    def kept_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bool] | None:
        """`kept_entries` for changelog records about to be restored."""
        return None

    @abstractmethod
    def restore(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Write changelog `(key, value)` records into the engine, beneath the layers
        (nothing is logged); a `None` value deletes."""

    def expired_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bytes]:
        """The changelog keys of what restoring `records` expires: what the store holds
        that their times expire, and the records it drops (late, or expired by a later
        one). Empty for stores without a retention by time. Asked before the restore; pass
        the answer through `still_expired` after it."""
        return []

    def still_expired(self, keys: list[bytes]) -> list[bytes]:
        """Those of `keys` (from `expired_records`) the store does not hold now: a
        tombstone must never remove a record the store still holds."""
        return keys

    @property
    def position(self) -> Position:
        return self.typed.position

    def update_position(self, position: Position) -> None:
        self.typed.update_position(position)

    def restore_position(self, position: Position) -> None:
        """Merge a restored record's position into the engine, beneath the layers."""
        self.engine.update_position(position)

    def settle(self) -> None:
        """The partition was just restored: the engine's `settle` (no layer buffers what a
        restore writes, which goes to the engine beneath them)."""
        self.engine.settle()

    def prepare_commit(self) -> None:
        """Push buffered writes down the chain (to the changelog) before offsets are taken."""
        self.typed.prepare_commit()

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        self.typed.commit(changelog_offsets)

    def committed_offset(self, partition: TopicPartition) -> int | None:
        return self.typed.committed_offset(partition)


class KeyValueStoreChain(StoreChain[MeteredKeyValueStore[Any, Any]]):
    """The chain of a key-value store partition."""

    def write(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.typed.put_all_serialized(entries)

    def restore(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        engine: Any = self.engine
        engine.put_all(records)


class WindowStoreChain(StoreChain[MeteredWindowStore[Any, Any]]):
    """The chain of a window store partition; changelog keys carry the window start."""

    def write(self, entries: list[tuple[bytes, int, bytes | None]]) -> None:
        self.typed.put_all_serialized(entries)

    def kept_entries(self, entries: list[tuple[bytes, int, bytes | None]]) -> list[bool] | None:
        return self._kept_at([window_start for _, window_start, _ in entries])

    def kept_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bool] | None:
        return self._kept_at([decode_window_key(key)[1] for key, _ in records])

    def _kept_at(self, window_starts: list[int]) -> list[bool] | None:
        engine: Any = self.engine
        return kept_windows(engine, window_starts)

    def restore(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        windows = []
        for window_key, value in records:
            key, window_start = decode_window_key(window_key)
            windows.append((key, window_start, value))
        engine: Any = self.engine
        engine.put_all(windows)

    def expired_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bytes]:
        engine: Any = self.engine
        starts = [decode_window_key(key)[1] for key, _ in records]
        return expired_by_records(engine, records, starts, encode_window_key)


class VersionedStoreChain(StoreChain[MeteredVersionedStore[Any, Any]]):
    """The chain of a versioned store partition. A batch's entries are changelog records
    (`encode_version_record`), so a writer and a replica restoring write the same thing.

    Its key lookup answers `VersionedKeyQuery` and `KeyQuery` (the current value); fused,
    when the engine answers them exactly as `get(key, as_of)`, as the key-value chain's
    does for `get(key)`."""

    _fused_ranges = False

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        engine = self.engine
        self._fused_ranges = (
            isinstance(engine, LayeredVersionedStore)
            and engine.versioned_ranges_are_found_in_range
            and self._can_fuse_key_lookup()
            and all(self.typed.handles(kind) for kind in _VERSIONED_RANGES)
            and not any(
                layer.handles(kind) for layer in self._between for kind in _VERSIONED_RANGES
            )
        )

    def _can_fuse_key_lookup(self) -> bool:
        engine = self.engine
        return (
            isinstance(engine, LayeredVersionedStore)
            and engine.versioned_queries_are_get
            and self.typed.handles(VersionedKeyQuery)
            and self.typed.handles(KeyQuery)
            and not any(
                layer.handles(VersionedKeyQuery) or layer.handles(KeyQuery)
                for layer in self._between
            )
        )

    def _fused_key_lookup(
        self, query: Any, key_bytes: bytes, bound: PositionBound, config: QueryConfig
    ) -> QueryResult[Any]:
        # What the layers answer, in one call to the engine; anything unusual (execution
        # info, a bound not reached, an exception) takes the layered path.
        position = self._fused_position(bound, config)
        if position is None:
            return self.typed.query(query, bound, config)
        engine: Any = self.engine
        try:
            found = engine.version_at(key_bytes, getattr(query, "as_of_timestamp", None))
            if found is None:
                return success_of(None, position)
            value = found[0]
            deserialize = self._deserialize_value
            if deserialize is not None:
                value = deserialize(value)
        except Exception:
            return self.typed.query(query, bound, config)
        if type(query) is KeyQuery:
            return success_of(value, position)
        return success_of(versioned_record(value, found[1], found[2]), position)

    def query(self, query: Query[R], bound: PositionBound, config: QueryConfig) -> QueryResult[R]:
        if self._fused_ranges and type(query) in _VERSIONED_RANGES:
            return self._fused_range(query, bound, config)
        return super().query(query, bound, config)

    def _fused_range(
        self, query: Any, bound: PositionBound, config: QueryConfig
    ) -> QueryResult[Any]:
        # An as-of range as the layers answer it, with each record made once: the engine's
        # scan selects the versions, the serdes decode keys and values in one call each.
        # Anything unusual (execution info, a bound not reached, a key or value the serdes
        # reject) takes the layered path, which answers it as it would anyway.
        position = self._fused_position(bound, config)
        if position is None:
            return self.typed.query(query, bound, config)
        engine: Any = self.engine
        typed = self.typed
        try:
            keys, values, stamps, valid_tos = engine.found_in_range(
                typed.encode_bound(query.lower_bound),
                typed.encode_bound(query.upper_bound),
                query.as_of_timestamp,
                getattr(query, "limit", None),
            )
            typed_keys = typed.key_serde.deserialize_many(keys)
            if self._deserialize_value is not None:
                values = typed.value_serde.deserialize_many(values)
            rows = versioned_rows(typed_keys, values, stamps, valid_tos)
        except Exception:
            return self.typed.query(query, bound, config)
        return QueryResult(KeyValueIterator.of_rows(rows), position)

    def write(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.typed.put_all_serialized([decode_version_record(k, v) for k, v in entries])

    def kept_entries(self, entries: list[tuple[bytes, bytes | None]]) -> list[bool] | None:
        return self.kept_records(entries)  # a batch's entries are changelog records

    def kept_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bool] | None:
        engine: Any = self.engine
        return kept_versions(engine, [decode_version_record(k, v)[1] for k, v in records])

    def restore(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        # A null value is the tombstone of an expired version, for compaction alone: every
        # replica drops the version itself (a version's own records are never null).
        engine: Any = self.engine
        engine.put_all([decode_version_record(k, v) for k, v in records if v is not None])

    def expired_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bytes]:
        # What the store held and the records' times expire, the records it drops as
        # behind the retention, and the versions the records may write or cut short and
        # expire with them (`versions_expiring`; `still_expired` keeps those expired).
        engine: Any = self.engine
        written = [(k, v) for k, v in records if v is not None]  # as `restore` skips them
        if not written:
            return []
        puts = [decode_version_record(k, v) for k, v in written]
        expiring = [version_key(key, stamp) for key, stamp in versions_expiring(engine, puts)]
        kept = kept_versions(engine, [stamp for _, stamp, _ in puts])
        dropped = (
            []
            if kept is None
            else [key for (key, _), flag in zip(written, kept, strict=True) if not flag]
        )
        return list(dict.fromkeys(expiring + dropped))

    def still_expired(self, keys: list[bytes]) -> list[bytes]:
        # A late put at the time of a version kept (a key's current version is kept however
        # old) shares that version's record key; so may a version the records wrote again.
        engine: Any = self.engine
        versions = [split_version_key(key) for key in keys]
        return [version_key(key, stamp) for key, stamp in expired_now(engine, versions)]


class SessionStoreChain(StoreChain[MeteredSessionStore[Any, Any]]):
    """The chain of a session store partition; entries and changelog records are keyed
    `key + start + end` (`encode_session_key`)."""

    def write(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.typed.put_all_serialized([_session_of(key, value) for key, value in entries])

    def kept_entries(self, entries: list[tuple[bytes, bytes | None]]) -> list[bool] | None:
        return self.kept_records(entries)  # a batch's entries are changelog records

    def kept_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bool] | None:
        engine: Any = self.engine
        return kept_sessions(engine, [decode_session_key(key)[2] for key, _ in records])

    def restore(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        engine: Any = self.engine
        engine.put_all([_session_of(key, value) for key, value in records])

    def expired_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> list[bytes]:
        engine: Any = self.engine
        ends = [decode_session_key(key)[2] for key, _ in records]
        return expired_by_records(engine, records, ends, encode_session_key)


def _session_of(key: bytes, value: bytes | None) -> tuple[bytes, int, int, bytes | None]:
    raw, start, end = decode_session_key(key)
    return raw, start, end, value


def versioned_chain(
    engine_store: VersionedKeyValueStore[bytes, bytes],
    key_serde: Serde[Any],
    value_serde: Serde[Any],
    *,
    logging: bool = False,
) -> VersionedStoreChain:
    """A versioned store partition's chain over `engine_store`, uninitialised."""
    store: VersionedKeyValueStore[bytes, bytes] = engine_store
    if logging:
        store = ChangeLoggingVersionedStore(store)
    return VersionedStoreChain(MeteredVersionedStore(store, key_serde, value_serde))


def session_chain(
    engine_store: SessionStore[bytes, bytes],
    key_serde: Serde[Any],
    value_serde: Serde[Any],
    *,
    logging: bool = False,
) -> SessionStoreChain:
    """A session store partition's chain over `engine_store`, uninitialised."""
    store: SessionStore[bytes, bytes] = engine_store
    if logging:
        store = ChangeLoggingSessionStore(store)
    return SessionStoreChain(MeteredSessionStore(store, key_serde, value_serde))


def key_value_chain(
    engine_store: KeyValueStore[bytes, bytes],
    key_serde: Serde[Any],
    value_serde: Serde[Any],
    *,
    caching: bool | int = False,
    logging: bool = False,
    timestamped: bool = False,
) -> KeyValueStoreChain:
    """A key-value store partition's chain over `engine_store`, uninitialised (a
    timestamped store's, with `timestamped`)."""
    return KeyValueStoreChain(
        build_key_value_chain(
            engine_store,
            key_serde,
            value_serde,
            caching=caching,
            logging=logging,
            timestamped=timestamped,
        )
    )


def window_chain(
    engine_store: WindowStore[bytes, bytes],
    key_serde: Serde[Any],
    value_serde: Serde[Any],
    *,
    logging: bool = False,
) -> WindowStoreChain:
    """A window store partition's chain over `engine_store`, uninitialised."""
    return WindowStoreChain(
        build_window_chain(engine_store, key_serde, value_serde, logging=logging)
    )
