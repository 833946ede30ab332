"""`PersistentWindowStore`: a window store on top of an engine's persistent key-value store.

Three key spaces share the engine's store, so windows inherit its atomic commits, offsets,
position and status marker:

* `0x00 + key + start`: the window's value (ordered by key, then window start);
* `0x01 + start + key`: an index by window start, to expire windows and scan by time;
* `0x02 stream-time`: the largest window start seen, for retention.

Window starts are encoded as 8 order-preserving bytes (`iqstate.keyspace`). Windows whose
start is at or before `stream time - retention` are dropped, as they arrive and from the
store, as Kafka Streams' window stores do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from iqstate.engine_store import check_window_sizes
from iqstate.iterators import KeyValueIterator
from iqstate.keyspace import decode_window_key, encode_window_key
from iqstate.layered_store import KeySpaceStore, insert_all
from iqstate.persistent import PersistentKeyValueStore
from iqstate.queries import Windowed, window_end
from iqstate.serdes import Serdes
from iqstate.store import WindowStore
from iqstate.times import MAX_MS, MIN_MS

_DATA, _BY_TIME = b"\x00", b"\x01"
_STREAM_TIME = b"\x02stream-time"
_time = Serdes.int64()


class PersistentWindowStore(KeySpaceStore, WindowStore[bytes, bytes]):
    """Subclass with `kind` and `key_value_class` (the engine's persistent key-value store)."""

    key_value_class: ClassVar[type[PersistentKeyValueStore]]

    def __init__(self, name: str, window_size_ms: int, retention_ms: int) -> None:
        check_window_sizes(name, window_size_ms, retention_ms)
        super().__init__(self.key_value_class(name))
        self._window_size_ms = window_size_ms
        self._retention_ms = retention_ms
        self._stream_time = MIN_MS

    @property
    def window_size_ms(self) -> int:
        return self._window_size_ms

    @property
    def retention_ms(self) -> int:
        return self._retention_ms

    def opened(self) -> None:
        stored = self.key_value_store.get(_STREAM_TIME)
        self._stream_time = _time.deserialize(stored) if stored is not None else MIN_MS

    def abandon(self) -> None:
        """Release without committing or marking closed, as a killed process would."""
        store = self.key_value_store
        if self._open and isinstance(store, PersistentKeyValueStore):
            store.abandon()
        self._open = False

    def keeps(self, window_start: int) -> bool:
        return window_start > max(self._stream_time, window_start) - self._retention_ms

    def put(self, key: bytes, value: bytes | None, window_start: int) -> None:
        self._check_open()
        if self._insert(key, window_start, value):
            self._drop_expired()

    def put_all(self, entries: Iterable[tuple[bytes, int, bytes | None]]) -> None:
        """The puts in order, then one drop of the windows they expired (`insert_all`);
        windows expire the same, they only leave the store at the end."""
        self._check_open()
        insert_all(entries, self._insert, self._drop_expired)

    def _insert(self, key: bytes, window_start: int, value: bytes | None) -> bool:
        """Write one window unless it is expired; True when the stream time advanced."""
        store = self.key_value_store
        advanced = window_start > self._stream_time
        if advanced:
            self._stream_time = window_start
            store.put(_STREAM_TIME, _time.serialize(window_start))
        if not self.keeps(window_start):
            return advanced
        data_key = _DATA + encode_window_key(key, window_start)
        time_key = _BY_TIME + _time.serialize(window_start) + key
        if value is None:
            store.put_all([(data_key, None), (time_key, None)])
        else:
            store.put_all([(data_key, value), (time_key, b"")])
        return advanced

    def _drop_expired(self) -> None:
        for time_key in self._indexed_until(self._stream_time - self._retention_ms):
            start, key = self._start_of(time_key), time_key[9:]
            self.key_value_store.put_all(
                [(time_key, None), (_DATA + encode_window_key(key, start), None)]
            )

    def expired_by(self, window_start: int) -> list[tuple[bytes, int]]:
        self._check_open()
        return [
            (time_key[9:], self._start_of(time_key))
            for time_key in self._indexed_until(window_start - self._retention_ms)
        ]

    def _indexed_until(self, limit: int) -> list[bytes]:
        """The index-by-time keys of the windows held with a start at or before `limit`."""
        return self.index_between(_BY_TIME, MIN_MS, limit)

    @staticmethod
    def _start_of(time_key: bytes) -> int:
        return _time.deserialize(time_key[1:9])

    def fetch(self, key: bytes, time_from: int, time_to: int) -> KeyValueIterator[int, bytes]:
        self._check_open()
        lower = _DATA + encode_window_key(key, max(time_from, MIN_MS))
        upper = _DATA + encode_window_key(key, min(time_to, MAX_MS))
        with self.key_value_store.range(lower, upper) as stored:
            found = []
            for data_key, value in stored:
                stored_key, start = decode_window_key(data_key[1:])
                if stored_key == key and time_from <= start <= time_to:
                    found.append((start, value))
        return KeyValueIterator(found)

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator[Windowed[bytes], bytes]:
        self._check_open()
        windows = sorted(
            (time_key[9:], self._start_of(time_key))
            for time_key in self.index_between(_BY_TIME, time_from, time_to)
        )
        size = self._window_size_ms
        found = []
        for key, start in windows:
            value = self.key_value_store.get(_DATA + encode_window_key(key, start))
            if value is not None:
                found.append((Windowed(key, start, window_end(start, size)), value))
        return KeyValueIterator(found)

    def approximate_num_entries(self) -> int:
        self._check_open()
        return max(0, (self.key_value_store.approximate_num_entries() - 1) // 2)
