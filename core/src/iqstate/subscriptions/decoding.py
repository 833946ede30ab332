"""A store type's entries as `Change`s, and a partition's matching entries as a snapshot.

A batch's entries reach a feed as the committer or follower wrote them (serialized, in
the store type's layout); decoding them here, on the subscriber's side, keeps that work
off the commit path. A snapshot is read in the same layouts, so one decoder serves both.

Layouts: key-value and global `(key, value)`; timestamped `(key, timestamp + value)`;
window `(key, window_start, value)` from a batch or `(key + window_start, value)` from a
changelog; versioned `(key + timestamp, version)`; session `(key + start + end, value)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from iqstate.keyspace import decode_window_key, prefix_upper_bound
from iqstate.layers.chain import StoreChain
from iqstate.queries import window_end
from iqstate.runtime.spec import StoreSpec
from iqstate.serdes import Serdes
from iqstate.session_store import decode_session_key, encode_session_key
from iqstate.subscriptions.changes import Change
from iqstate.subscriptions.filters import KeyFilter
from iqstate.times import MAX_MS, MIN_MS
from iqstate.versioned_store import decode_version_record, encode_version_record

Decoded = tuple[bytes, Change]
"""An entry's serialized key (what filters compare) and its change."""
Decoder = Callable[[Any], Decoded]
_from_ts = Serdes.int64().deserialize


def decoder_for(spec: StoreSpec) -> Decoder:
    """How an entry of `spec`'s type of store becomes a change."""
    key_of = spec.key_serde.deserialize
    value_serde = spec.value_serde.deserialize

    def value_of(value: bytes | None) -> Any:
        return None if value is None else value_serde(value)

    kind = spec.store_type
    if kind == "timestamped_key_value":

        def stamped(entry: tuple[bytes, bytes | None]) -> Decoded:
            key, value = entry
            if value is None:
                return key, Change(key_of(key), None)
            return key, Change(key_of(key), value_serde(value[8:]), timestamp=_from_ts(value[:8]))

        return stamped
    if kind == "window":
        size = int(spec.window_size_ms)  # type: ignore[attr-defined]

        def windowed(entry: tuple[Any, ...]) -> Decoded:
            if len(entry) == 3:
                key, start, value = entry
            else:
                (key, start), value = decode_window_key(entry[0]), entry[1]
            return key, Change(
                key_of(key), value_of(value), window=(start, window_end(start, size))
            )

        return windowed
    if kind == "versioned_key_value":

        def versioned(entry: tuple[bytes, bytes | None]) -> Decoded:
            key, timestamp, value = decode_version_record(entry[0], entry[1])
            return key, Change(key_of(key), value_of(value), timestamp=timestamp)

        return versioned
    if kind == "session":

        def session(entry: tuple[bytes, bytes | None]) -> Decoded:
            key, start, end = decode_session_key(entry[0])
            return key, Change(key_of(key), value_of(entry[1]), window=(start, end))

        return session

    def plain(entry: tuple[bytes, bytes | None]) -> Decoded:
        return entry[0], Change(key_of(entry[0]), value_of(entry[1]))

    return plain


def read_snapshot(spec: StoreSpec, chain: StoreChain[Any], keys: KeyFilter) -> list[Any]:
    """Every entry of the partition whose key `keys` matches, in `decoder_for`'s layouts
    (call under the partition's lock, so the entries belong to one position)."""
    store: Any = chain.typed.wrapped  # the serialized store beneath the typed layer
    kind = spec.store_type
    rows: list[Any]
    if kind == "window":
        if keys.key is not None:
            with store.fetch(keys.key, MIN_MS, MAX_MS) as windows:
                return [(keys.key, start, value) for start, value in windows]
        with store.all() as windows:
            rows = [(w.key, w.start_ms, value) for w, value in windows]
    elif kind == "session":
        with store.fetch_sessions(keys.key, MIN_MS, MAX_MS) as sessions:
            rows = [(encode_session_key(s.key, s.start_ms, s.end_ms), v) for s, v in sessions]
        return [row for row in rows if keys.matches(decode_session_key(row[0])[0])]
    elif kind == "versioned_key_value":
        lower, upper = _bounds(keys)
        # a deleted key's tombstone too: a later put older than it is not the current value
        current = store.current_in_range(lower, upper)
        rows = [encode_version_record(key, stamp, value) for key, stamp, value in current]
        return [row for row in rows if keys.matches(decode_version_record(row[0], row[1])[0])]
    elif keys.key is not None:
        value = store.get(keys.key)
        return [] if value is None else [(keys.key, value)]
    elif keys.prefix is not None:
        with store.prefix_scan(keys.prefix) as pairs:
            return list(pairs)
    else:
        with store.range(keys.lower, keys.upper) as pairs:
            return list(pairs)
    return rows if keys.everything else [row for row in rows if keys.matches(row[0])]


def _bounds(keys: KeyFilter) -> tuple[bytes | None, bytes | None]:
    """The key range a filter lies in (a prefix's: from it to its upper bound)."""
    if keys.key is not None:
        return keys.key, keys.key
    if keys.prefix is not None:
        return keys.prefix, prefix_upper_bound(keys.prefix)
    return keys.lower, keys.upper
