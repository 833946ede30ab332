"""`LayeredSessionStore`: a session store in an engine's key-value store.

Laid out for its queries:

* `0x00 + length + key + start + end` -> value: a key's sessions together, by start, so
  `WindowRangeQuery.with_key` is one scan of exactly that key's entries;
* `0x01 + end + length + key + start`: sessions by end, to drop those past the retention
  without scanning the others;
* `0x02`: the newest session end seen (the stream time retention counts back from).

A session whose end is at or before `stream time - retention_ms` is dropped, as it
arrives and from the store (Kafka's session stores expire by session end too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

from iqstate.engine import Engine, SessionStoreFactory
from iqstate.iterators import KeyValueIterator
from iqstate.keyspace import prefix_upper_bound
from iqstate.layered_store import (
    KeySpaceStore,
    insert_all,
    length_prefixed,
    split_length_prefixed,
)
from iqstate.queries import Windowed
from iqstate.serdes import Serdes
from iqstate.store import KeyValueStore, SessionStore
from iqstate.times import MIN_MS, Time, stored_ms

_DATA, _BY_END, _STREAM_TIME = b"\x00", b"\x01", b"\x02"
_time = Serdes.int64()
_ts, _from_ts = _time.serialize, _time.deserialize


def encode_session_key(key: bytes, start_ms: int, end_ms: int) -> bytes:
    """A session's changelog key: `key + start + end` (16 bytes of times at the end)."""
    return key + _ts(start_ms) + _ts(end_ms)


def decode_session_key(data: bytes) -> tuple[bytes, int, int]:
    """The `(key, start_ms, end_ms)` that `encode_session_key` encoded."""
    if len(data) < 16:
        raise ValueError(f"a session key needs at least 16 bytes, got {len(data)}")
    return data[:-16], _from_ts(data[-16:-8]), _from_ts(data[-8:])


def check_session(store: str, start: Time, end: Time) -> tuple[int, int]:
    """A session's start and end in ms (`stored_ms`), the start at or before the end."""
    start_ms = stored_ms(start, "store {!r}: a session's start", store)
    end_ms = stored_ms(end, "store {!r}: a session's end", store)
    if start_ms > end_ms:
        raise ValueError(
            f"store {store!r}: a session's start ({start_ms}) is after its end ({end_ms})"
        )
    return start_ms, end_ms


class LayeredSessionStore(KeySpaceStore, SessionStore[bytes, bytes]):
    """A session store over bytes in `key_value_store`, keeping `retention_ms`."""

    kind: ClassVar[str] = "layered.session"

    def __init__(self, key_value_store: KeyValueStore[bytes, bytes], retention_ms: int) -> None:
        super().__init__(key_value_store)
        if isinstance(retention_ms, bool) or not isinstance(retention_ms, int) or retention_ms < 0:
            raise ValueError(f"retention_ms must be an int >= 0, got {retention_ms!r}")
        self._retention = retention_ms
        self._stream_time = MIN_MS

    @property
    def retention_ms(self) -> int:
        return self._retention

    def opened(self) -> None:
        stored = self.key_value_store.get(_STREAM_TIME)
        self._stream_time = _from_ts(stored) if stored is not None else MIN_MS

    def _limit(self) -> int:
        return max(MIN_MS, self._stream_time - self._retention)

    def keeps(self, end_ms: int) -> bool:
        return end_ms > max(MIN_MS, max(self._stream_time, end_ms) - self._retention)

    def put(self, key: bytes, value: bytes | None, start_ms: int, end_ms: int) -> None:
        self._check_open()
        if self._insert(key, start_ms, end_ms, value):
            self._drop_expired()

    def put_all(self, entries: Iterable[tuple[bytes, int, int, bytes | None]]) -> None:
        """The puts in order, then one drop of the sessions they expired (`insert_all`);
        sessions expire the same, they only leave the store at the end."""
        self._check_open()
        insert_all(entries, self._insert, self._drop_expired)

    def _insert(self, key: bytes, start_ms: int, end_ms: int, value: bytes | None) -> bool:
        """Write one session unless it is expired; True when the stream time advanced."""
        start_ms, end_ms = check_session(self.name, start_ms, end_ms)
        store = self.key_value_store
        advanced = end_ms > self._stream_time
        if advanced:
            self._stream_time = end_ms
            store.put(_STREAM_TIME, _ts(end_ms))
        if not self.keeps(end_ms):
            return advanced
        prefixed = length_prefixed(key)
        data_key = _DATA + prefixed + _ts(start_ms) + _ts(end_ms)
        index_key = _BY_END + _ts(end_ms) + prefixed + _ts(start_ms)
        if value is None:
            store.put_all([(data_key, None), (index_key, None)])
        else:
            store.put_all([(data_key, value), (index_key, b"")])
        return advanced

    def _drop_expired(self) -> None:
        doomed: list[tuple[bytes, bytes | None]] = []
        for index_key in self._ended_by(self._limit()):
            doomed.append((index_key, None))
            doomed.append((_DATA + index_key[9:] + index_key[1:9], None))
        if doomed:
            self.key_value_store.put_all(doomed)

    def expired_by(self, end_ms: int) -> list[tuple[bytes, int, int]]:
        self._check_open()
        expired = []
        for index_key in self._ended_by(end_ms - self._retention):
            key, start = split_length_prefixed(index_key[9:])
            expired.append((key, _from_ts(start), _from_ts(index_key[1:9])))
        return expired

    def _ended_by(self, limit: int) -> list[bytes]:
        """The index-by-end keys (`0x01 + end + length + key + start`) of the sessions held
        that end at or before `limit`."""
        if limit <= MIN_MS:
            return []
        return self.index_between(_BY_END, MIN_MS, limit)

    def fetch_sessions(
        self, key: bytes | None, time_from: int, time_to: int
    ) -> KeyValueIterator[Windowed[bytes], bytes]:
        self._check_open()
        if key is None:
            lower, upper = _DATA, prefix_upper_bound(_DATA)
        else:
            prefixed = _DATA + length_prefixed(key)
            lower, upper = prefixed, prefix_upper_bound(prefixed)
        found = []
        with self.key_value_store.range(lower, upper) as stored:
            for data_key, value in stored:
                if data_key[:1] != _DATA or (upper is not None and data_key == upper):
                    continue
                session_key, times = split_length_prefixed(data_key[1:])
                start, end = _from_ts(times[:8]), _from_ts(times[8:])
                if time_from <= start <= time_to:
                    found.append((Windowed(session_key, start, end), value))
        if key is None:
            found.sort(key=lambda pair: (pair[0].key, pair[0].start_ms, pair[0].end_ms))
        return KeyValueIterator.of_rows(found)

    def approximate_num_entries(self) -> int:
        self._check_open()
        with self.key_value_store.range(_DATA, prefix_upper_bound(_DATA)) as stored:
            return sum(1 for data_key, _ in stored if data_key[:1] == _DATA)


@dataclass(frozen=True)
class LayeredSessionStoreFactory:
    """Makes `LayeredSessionStore`s in the stores `key_value_store` makes (picklable, for a
    store test's writer process)."""

    key_value_store: Callable[[str], KeyValueStore[bytes, bytes]]

    def __call__(self, name: str, retention_ms: int) -> LayeredSessionStore:
        return LayeredSessionStore(self.key_value_store(name), retention_ms)


def session_store_factory(engine: Engine) -> SessionStoreFactory:
    """The engine's factory of session stores: its own, or one keeping them in its key-value
    stores."""
    if engine.session_store is not None:
        return engine.session_store
    return LayeredSessionStoreFactory(engine.key_value_store)
