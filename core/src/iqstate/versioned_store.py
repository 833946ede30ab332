"""`LayeredVersionedStore`: a versioned key-value store in an engine's key-value store.

Laid out for its queries, in key spaces of one key-value store:

* `0x05 + key` -> the key's timeline: its current version, then its older ones, packed in
  one value (`iqstate.version_history`, as Kafka packs a segment's versions of a key), so
  a lookup of the current version or of the one valid at any time is one read, and an
  as-of range one scan;
* `0x03 + valid_to + key`: for each key with older versions, when its oldest one stopped
  being valid, to drop those wholly outside the retention without reading the others;
* `0x04 + timestamp + key`: keys whose current version is a tombstone, dropped the same way;
* `0x02`: the newest timestamp seen (the stream time retention counts back from).

A put older than the retention (`stream time - history_retention_ms`) is dropped, and a
query for a time before it answers only the current version when that is valid then,
nothing rather than an older version it can no longer prove (Kafka's rules). A
multi-version query leaves out versions that ended before the retention, deterministically
(Kafka returns those still in a segment not yet dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from iqstate.engine import Engine, VersionedStoreFactory
from iqstate.errors import CorruptStateError
from iqstate.iterators import KeyValueIterator
from iqstate.keyspace import prefix_upper_bound
from iqstate.layered_store import KeySpaceStore, insert_all
from iqstate.queries import (
    KeyQuery,
    LimitedVersionedRangeQuery,
    VersionedKeyQuery,
    VersionedRangeQuery,
    VersionedRecord,
)
from iqstate.serdes import Serdes
from iqstate.store import KeyValueStore, VersionedKeyValueStore
from iqstate.store_handlers import (
    answer_latest_value_query,
    answer_limited_versioned_range_query,
    answer_versioned_key_query,
    answer_versioned_range_query,
)
from iqstate.times import MAX_MS, MIN_MS
from iqstate.version_history import (
    Found,
    History,
    Version,
    current_of,
    history_at,
    pack_history,
    pack_timeline,
    versions_of,
)
from iqstate.version_selection import (
    FoundLists,
    found_at,
    select_found,
    versioned_record,
    versioned_rows,
)

_STREAM_TIME, _BY_VALID_TO, _TOMBSTONES, _TIMELINE = b"\x02", b"\x03", b"\x04", b"\x05"
_EARLIER_LAYOUT = (b"\x00", b"\x01")
"""Where the first layout kept current versions and histories apart: no key of this one
starts with these."""
_VALUE, _TOMBSTONE = b"\x01", b"\x00"
_time = Serdes.int64()
_ts, _from_ts = _time.serialize, _time.deserialize
_RANGE_CHUNK = 1_000
"""Timelines read at a time by an as-of range without a limit."""
_MIN_CHUNK = 100
"""Timelines read at a time by an as-of range with a smaller limit."""


def encode_version_record(key: bytes, timestamp: int, value: bytes | None) -> tuple[bytes, bytes]:
    """A version as a changelog record: key `key + timestamp`, value `flag + value` (never
    null: a tombstone version is a record to keep; a null value is the tombstone of an
    expired version, for compaction)."""
    return version_key(key, timestamp), _TOMBSTONE if value is None else _VALUE + value


def version_key(key: bytes, timestamp: int) -> bytes:
    """The changelog key of `key`'s version at `timestamp`."""
    return key + _ts(timestamp)


def split_version_key(record_key: bytes) -> tuple[bytes, int]:
    """The `(key, timestamp)` of a changelog key `version_key` made."""
    return record_key[:-8], _from_ts(record_key[-8:])


def decode_version_record(key: bytes, value: bytes | None) -> tuple[bytes, int, bytes | None]:
    """The `(key, timestamp, value or None)` of a record `encode_version_record` made."""
    if len(key) < 8 or value is None or value[:1] not in (_VALUE, _TOMBSTONE):
        raise ValueError(
            f"a versioned store's record needs a key of at least 8 bytes and a value "
            f"starting with a flag byte, got key {key[:16]!r}, value {(value or b'')[:8]!r}"
        )
    return key[:-8], _from_ts(key[-8:]), (value[1:] if value[:1] == _VALUE else None)


def _stamp(version: Version) -> int:
    return version[0]


def _oldest_valid_to(history: list[Version], latest: int) -> int | None:
    """When the oldest of `history` stopped being valid (None: no history)."""
    if not history:
        return None
    return history[1][0] if len(history) > 1 else latest


_Ending = tuple[bytes, bytes, tuple[list[Version], Version] | None]
"""An expiry index entry, its key, and the key's older versions and current one (None:
the key holds none)."""


def _kept_history(history: list[Version], latest: int, boundary: int) -> list[Version]:
    """The older versions still valid after `boundary` (each ends where the next starts,
    the last where the current version, at `latest`, does)."""
    return [
        version
        for index, version in enumerate(history)
        if (history[index + 1][0] if index + 1 < len(history) else latest) > boundary
    ]


def _record(found: Found | None) -> VersionedRecord[bytes] | None:
    return None if found is None else versioned_record(*found)


class LayeredVersionedStore(KeySpaceStore, VersionedKeyValueStore[bytes, bytes]):
    """A versioned store over bytes in `key_value_store`, keeping `history_retention_ms`."""

    kind: ClassVar[str] = "layered.versioned"

    def __init__(
        self, key_value_store: KeyValueStore[bytes, bytes], history_retention_ms: int
    ) -> None:
        super().__init__(key_value_store)
        if isinstance(history_retention_ms, bool) or not isinstance(history_retention_ms, int):
            raise TypeError(f"history_retention_ms must be an int, got {history_retention_ms!r}")
        if history_retention_ms < 0:
            raise ValueError(f"history_retention_ms must be >= 0, got {history_retention_ms}")
        self._retention = history_retention_ms
        self._stream_time = MIN_MS

    @property
    def history_retention_ms(self) -> int:
        return self._retention

    @property
    def versioned_queries_are_get(self) -> bool:
        """True iff this store answers `VersionedKeyQuery` exactly as `get(key, as_of)` and
        `KeyQuery` as the current value at `current_position` (the built-in handlers), so a
        store chain may read it that way in one call (`version_at`)."""
        return (
            self._handlers.get(VersionedKeyQuery) is answer_versioned_key_query
            and self._handlers.get(KeyQuery) is answer_latest_value_query
        )

    @property
    def versioned_ranges_are_found_in_range(self) -> bool:
        """True iff this store answers `VersionedRangeQuery` and its limited form exactly as
        `range_as_of` (the built-in handlers), so a store chain may read them as
        `found_in_range`."""
        return (
            self._handlers.get(VersionedRangeQuery) is answer_versioned_range_query
            and self._handlers.get(LimitedVersionedRangeQuery)
            is answer_limited_versioned_range_query
        )

    def opened(self) -> None:
        store = self.key_value_store
        with store.limited_range(_EARLIER_LAYOUT[0], _STREAM_TIME, 1) as first:
            if any(key[:1] in _EARLIER_LAYOUT for key, _ in first):
                raise CorruptStateError(
                    f"versioned store {self.name!r} was written in the layout of an earlier "
                    "iqstate (current versions and histories apart), which this one does not "
                    "read: rebuild it from its changelog or by re-running the pipeline"
                )
        stored = store.get(_STREAM_TIME)
        self._stream_time = _from_ts(stored) if stored is not None else MIN_MS

    def _boundary(self) -> int:
        """The oldest time a query can still be answered for."""
        return max(MIN_MS, self._stream_time - self._retention)

    # -- writes ------------------------------------------------------------------------

    def keeps(self, timestamp: int) -> bool:
        return timestamp >= self._boundary()

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        self._check_open()
        if self._insert(key, timestamp, value):
            self._drop_expired()

    def put_all(self, entries: Iterable[tuple[bytes, int, bytes | None]]) -> None:
        """The puts in order, then one drop of what they expired (`insert_all`); versions
        expire the same, they only leave the store at the end."""
        self._check_open()
        insert_all(entries, self._insert, self._drop_expired)

    def _insert(self, key: bytes, timestamp: int, value: bytes | None) -> bool:
        """Put one version, unless it is older than the history kept (Kafka drops it too);
        True when the stream time advanced, so what the store holds may have expired."""
        store = self.key_value_store
        if timestamp < self._boundary():
            return False
        advanced = timestamp > self._stream_time
        if advanced:
            self._stream_time = timestamp
            store.put(_STREAM_TIME, _ts(timestamp))
        stored = store.get(_TIMELINE + key)
        writes: list[tuple[bytes, bytes | None]] = []
        becomes_current = True  # the put is the key's newest version
        if stored is None:
            timeline = pack_timeline((timestamp, value), b"")
        else:
            current = current_of(stored)
            becomes_current = timestamp >= current[0]
            at = history_at(stored)
            if timestamp == current[0]:  # replaces the current version, history unchanged
                timeline = pack_timeline((timestamp, value), stored[at:])
            else:
                history = History(stored, at).versions() if at < len(stored) else []
                if timestamp > current[0]:  # the current version becomes history
                    after = ([*history, current], timestamp)
                else:  # out of order: into its place in the history
                    kept = [version for version in history if version[0] != timestamp]
                    kept.append((timestamp, value))
                    kept.sort(key=_stamp)
                    after = (kept, current[0])
                self._reindex(key, (history, current[0]), after, writes)
                newest = (timestamp, value) if timestamp > current[0] else current
                timeline = pack_timeline(newest, pack_history(after[0]))
            if becomes_current and current[1] is None:
                writes.append((_TOMBSTONES + _ts(current[0]) + key, None))
        if becomes_current and value is None:
            writes.append((_TOMBSTONES + _ts(timestamp) + key, b""))
        writes.append((_TIMELINE + key, timeline))
        store.put_all(writes)
        if not advanced and timestamp == self._boundary():
            # It may have cut the version before it short to end at the boundary, which no
            # query can see: dropped now (rare), so that it is named expired with the put.
            self._drop_expired(deleted_keys=False)
        return advanced

    @staticmethod
    def _reindex(
        key: bytes,
        before: tuple[list[Version], int],
        after: tuple[list[Version], int],
        writes: list[tuple[bytes, bytes | None]],
    ) -> None:
        """Writes keeping `key`'s expiry index entry in step with its older versions, each
        side given with the time its current version starts (`(versions, latest)`)."""
        old, new = _oldest_valid_to(*before), _oldest_valid_to(*after)
        if old != new and old is not None:
            writes.append((_BY_VALID_TO + _ts(old) + key, None))
        if old != new and new is not None:
            writes.append((_BY_VALID_TO + _ts(new) + key, b""))

    def _drop_expired(self, deleted_keys: bool = True) -> None:
        """Drop the older versions that ended at or before the boundary and, with
        `deleted_keys`, the keys whose current version is a tombstone from before it."""
        boundary = self._boundary()
        if boundary == MIN_MS:
            return
        writes: list[tuple[bytes, bytes | None]] = []
        for index_key, key, timeline in self._ending(boundary):
            if timeline is None:  # nothing left to drop: only the index entry
                writes.append((index_key, None))
                continue
            history, current = timeline
            kept = _kept_history(history, current[0], boundary)
            self._reindex(key, (history, current[0]), (kept, current[0]), writes)
            writes.append((_TIMELINE + key, pack_timeline(current, pack_history(kept))))
        for index_key in self._deleted(boundary) if deleted_keys else ():
            writes.append((index_key, None))
            writes.append((_TIMELINE + index_key[9:], None))
        if writes:
            self.key_value_store.put_all(writes)

    def expired_by(self, timestamp: int) -> list[tuple[bytes, int]]:
        """`(key, timestamp)` of each version held now that a put at `timestamp` drops:
        older versions that stopped being valid before the retention, and every version of
        a key whose current version is a tombstone from before it."""
        self._check_open()
        boundary = max(MIN_MS, max(self._stream_time, timestamp) - self._retention)
        if boundary == MIN_MS:
            return []
        expired: dict[tuple[bytes, int], None] = {}
        for _, key, timeline in self._ending(boundary):
            if timeline is not None:
                history, current = timeline
                kept = _kept_history(history, current[0], boundary)
                expired.update(
                    dict.fromkeys((key, stamp) for stamp, _ in history[: len(history) - len(kept)])
                )
        store = self.key_value_store
        for index_key in self._deleted(boundary):
            key = index_key[9:]
            stored = store.get(_TIMELINE + key)
            if stored is not None:
                history, current = versions_of(stored)
                expired.update(dict.fromkeys((key, stamp) for stamp, _ in (*history, current)))
        # Only versions no later put can write again: a put at the boundary itself is kept
        # (`keeps`), and its record would share the key of a tombstone written after it.
        return [(key, stamp) for key, stamp in expired if stamp < boundary]

    def _ending(self, boundary: int) -> list[_Ending]:
        """The keys whose oldest older version ended at or before `boundary`: each with its
        index entry and its timeline read (its older versions and current one; None when
        the key holds none)."""
        store = self.key_value_store
        found: list[_Ending] = []
        for index_key in self.index_between(_BY_VALID_TO, MIN_MS, boundary):
            key = index_key[9:]
            stored = store.get(_TIMELINE + key)
            found.append((index_key, key, None if stored is None else versions_of(stored)))
        return found

    def _deleted(self, boundary: int) -> list[bytes]:
        """The index entries (`0x04 + timestamp + key`) of the keys whose current version is
        a tombstone from before `boundary`. One exactly at it stays until the boundary
        passes it: a put at the boundary is still kept, so the tombstone's changelog record
        cannot be named expired yet (`expired_by`), and dropping it unnamed would leave
        that record for ever. It answers as a dropped key would (no value)."""
        return self.index_between(_TOMBSTONES, MIN_MS, boundary - 1)

    # -- reads -------------------------------------------------------------------------

    def latest_version(self, key: bytes) -> tuple[int, bytes | None] | None:
        self._check_open()
        stored = self.key_value_store.get(_TIMELINE + key)
        return None if stored is None else current_of(stored)

    def version_at(self, key: bytes, as_of: int | None) -> Found | None:
        """`get` as `(value, timestamp, valid_to)`: what a store chain's fused lookup
        reads, without a record made twice."""
        self._check_open()
        stored = self.key_value_store.get(_TIMELINE + key)
        return None if stored is None else found_at(stored, as_of, self._boundary())

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord[bytes] | None:
        return _record(self.version_at(key, as_of))

    def versions(
        self, key: bytes, time_from: int | None, time_to: int | None, ascending: bool
    ) -> list[VersionedRecord[bytes]]:
        self._check_open()
        stored = self.key_value_store.get(_TIMELINE + key)
        start = MIN_MS if time_from is None else time_from
        end = MAX_MS if time_to is None else time_to
        if stored is None or start > end:
            return []
        history, current = versions_of(stored)
        if end < self._boundary():  # only the current version is provable there
            timestamp, value = current
            valid = value is not None and timestamp <= end
            return [VersionedRecord(value, timestamp, None)] if valid else []  # type: ignore[arg-type]
        timeline = [*history, current]
        records = []
        after = max(start, self._boundary())  # a version must be valid after both
        for index, (timestamp, value) in enumerate(timeline):
            valid_to = timeline[index + 1][0] if index + 1 < len(timeline) else None
            if value is not None and timestamp <= end and (valid_to is None or valid_to > after):
                records.append(VersionedRecord(value, timestamp, valid_to))
        return records if ascending else records[::-1]

    def held_timestamps(self, key: bytes) -> list[int]:
        self._check_open()
        stored = self.key_value_store.get(_TIMELINE + key)
        if stored is None:
            return []
        at = history_at(stored)
        older = list(History(stored, at).stamps) if at < len(stored) else []
        return [*older, current_of(stored)[0]]

    def holds_version(self, key: bytes, timestamp: int) -> bool:
        self._check_open()
        stored = self.key_value_store.get(_TIMELINE + key)
        if stored is None:
            return False
        at = history_at(stored)
        if current_of(stored)[0] == timestamp:
            return True
        return at < len(stored) and timestamp in History(stored, at).stamps

    def current_in_range(
        self, lower: bytes | None, upper: bytes | None
    ) -> list[tuple[bytes, int, bytes | None]]:
        self._check_open()
        low = _TIMELINE + (lower or b"")
        high = _TIMELINE + upper if upper is not None else prefix_upper_bound(_TIMELINE)
        with self.key_value_store.range(low, high) as timelines:
            return [
                (key[1:], *current_of(stored))
                for key, stored in timelines
                if key[:1] == _TIMELINE  # an open upper bound is the next key space's first
            ]

    def found_in_range(
        self, lower: bytes | None, upper: bytes | None, as_of: int | None, limit: int | None
    ) -> tuple[list[bytes], list[bytes], list[int], list[int | None]]:
        """`range_as_of` as four lists, the keys and the versions found's values, timestamps
        and ends of validity: what a store chain's fused range reads, without a record
        made twice."""
        self._check_open()
        low = _TIMELINE + (lower or b"")
        high = _TIMELINE + upper if upper is not None else prefix_upper_bound(_TIMELINE)
        boundary = self._boundary()
        found: FoundLists = ([], [], [], [])
        # A page reads about what it returns, at least a chunk's worth of timelines (a
        # page of 2 over many deleted keys would otherwise read 2 at a time).
        chunk = _RANGE_CHUNK if limit is None else max(limit, _MIN_CHUNK)
        while True:
            wanted = None if limit is None else limit - len(found[0])
            read, last = self.select_in_chunk(low, high, chunk, as_of, boundary, wanted, found)
            if read < chunk or last is None or (limit is not None and len(found[0]) >= limit):
                return found
            low = last + b"\x00"  # the least key after the chunk's last

    def select_in_chunk(
        self,
        low: bytes,
        high: bytes | None,
        chunk: int,
        as_of: int | None,
        boundary: int,
        wanted: int | None,
        found: FoundLists,
    ) -> tuple[int, bytes | None]:
        """Append to `found` the versions at `as_of` of the first `chunk` timelines from
        `low` to `high` (at most `wanted`; `select_found`): how many were read, and the last
        one's key. An engine's versioned store may read them more directly."""
        with self.key_value_store.limited_range(low, high, chunk) as timelines:
            rows = list(timelines)
        select_found(rows, as_of, boundary, wanted, found)
        return len(rows), rows[-1][0] if rows else None

    def range_as_of(
        self, lower: bytes | None, upper: bytes | None, as_of: int | None, limit: int | None = None
    ) -> KeyValueIterator[bytes, VersionedRecord[bytes]]:
        return KeyValueIterator.of_rows(
            versioned_rows(*self.found_in_range(lower, upper, as_of, limit))
        )

    def approximate_num_entries(self) -> int:
        """How many keys have a current version (tombstones included)."""
        self._check_open()
        with self.key_value_store.range(_TIMELINE, prefix_upper_bound(_TIMELINE)) as latest:
            return sum(1 for key, _ in latest if key[:1] == _TIMELINE)


@dataclass(frozen=True)
class LayeredVersionedStoreFactory:
    """Makes `LayeredVersionedStore`s in the stores `key_value_store` makes (picklable, for a
    store test's writer process)."""

    key_value_store: Callable[[str], KeyValueStore[bytes, bytes]]

    def __call__(self, name: str, history_retention_ms: int) -> LayeredVersionedStore:
        return LayeredVersionedStore(self.key_value_store(name), history_retention_ms)


def versioned_store_factory(engine: Engine) -> VersionedStoreFactory:
    """The engine's factory of versioned stores: its own, or one keeping them in its key-value
    stores."""
    if engine.versioned_store is not None:
        return engine.versioned_store
    return LayeredVersionedStoreFactory(engine.key_value_store)
