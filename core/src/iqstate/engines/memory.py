"""The `memory` engine: sorted key-value and window stores held in process memory.

Not persistent and does not manage offsets: a reopened store is empty and must be
rebuilt from its changelog. Iterators are snapshots taken when they are created, so
later writes never disturb a reader.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from sortedcontainers import SortedDict, SortedList

from iqstate.context import StateStoreContext
from iqstate.engine import Engine
from iqstate.engine_store import EngineStore, check_window_sizes
from iqstate.hookspecs import hookimpl
from iqstate.iterators import KeyValueIterator
from iqstate.keyspace import prefix_upper_bound
from iqstate.position import TopicPartition
from iqstate.queries import Windowed, window_end
from iqstate.store import KeyValueStore, WindowStore
from iqstate.times import MIN_MS


class MemoryKeyValueStore(EngineStore, KeyValueStore[bytes, bytes]):
    """A key-value store over a `SortedDict` of bytes."""

    kind = "memory.key_value"
    persistent = False

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._data: SortedDict = SortedDict()

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        self._data = SortedDict()

    def close(self) -> None:
        super().close()
        self._data = SortedDict()

    def get(self, key: bytes) -> bytes | None:
        if not self._open:
            self._check_open()
        value: bytes | None = self._data.get(key)
        return value

    def put(self, key: bytes, value: bytes | None) -> None:
        if not self._open:
            self._check_open()
        if value is None:
            self._data.pop(key, None)
        else:
            self._data[key] = value

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        self._check_open()
        data = self._data
        for key, value in entries:
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value

    def delete(self, key: bytes) -> bytes | None:
        self._check_open()
        old: bytes | None = self._data.pop(key, None)
        return old

    def _snapshot(
        self, lower: bytes | None, upper: bytes | None, reverse: bool, inclusive_upper: bool = True
    ) -> KeyValueIterator[bytes, bytes]:
        self._check_open()
        data = self._data
        keys = list(data.irange(lower, upper, inclusive=(True, inclusive_upper), reverse=reverse))
        return KeyValueIterator.of_rows(list(zip(keys, map(data.__getitem__, keys), strict=True)))

    def range(self, lower: bytes | None, upper: bytes | None) -> KeyValueIterator[bytes, bytes]:
        return self._snapshot(lower, upper, reverse=False)

    def reverse_range(
        self, lower: bytes | None, upper: bytes | None
    ) -> KeyValueIterator[bytes, bytes]:
        return self._snapshot(lower, upper, reverse=True)

    def limited_range(
        self, lower: bytes | None, upper: bytes | None, limit: int, reverse: bool = False
    ) -> KeyValueIterator[bytes, bytes]:
        """The first `limit` pairs of the range, read from the sorted keys without the rest."""
        self._check_open()
        data = self._data
        keys = list(islice(data.irange(lower, upper, reverse=reverse), limit))
        return KeyValueIterator.of_rows(list(zip(keys, map(data.__getitem__, keys), strict=True)))

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        return self._snapshot(prefix, prefix_upper_bound(prefix), False, inclusive_upper=False)

    def approximate_num_entries(self) -> int:
        self._check_open()
        return len(self._data)

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        self._check_open()
        self.check_offsets(changelog_offsets)


class MemoryWindowStore(EngineStore, WindowStore[bytes, bytes]):
    """A window store over a `SortedDict` keyed by `(key, window_start)`.

    Windows whose start is at or before `observed stream time - retention` are dropped,
    as they arrive and from the store, as Kafka Streams' window stores do.
    """

    kind = "memory.window"
    persistent = False

    def __init__(self, name: str, window_size_ms: int, retention_ms: int) -> None:
        super().__init__(name)
        check_window_sizes(name, window_size_ms, retention_ms)
        self._window_size_ms = window_size_ms
        self._retention_ms = retention_ms
        self._reset()

    def _reset(self) -> None:
        self._data: SortedDict = SortedDict()
        self._by_time: SortedList = SortedList()
        self._observed_stream_time = MIN_MS

    @property
    def window_size_ms(self) -> int:
        return self._window_size_ms

    @property
    def retention_ms(self) -> int:
        return self._retention_ms

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        self._reset()

    def close(self) -> None:
        super().close()
        self._reset()

    def _expiry_limit(self) -> int:
        return self._observed_stream_time - self._retention_ms

    def keeps(self, window_start: int) -> bool:
        return window_start > max(self._observed_stream_time, window_start) - self._retention_ms

    def put(self, key: bytes, value: bytes | None, window_start: int) -> None:
        self._check_open()
        if window_start > self._observed_stream_time:
            self._observed_stream_time = window_start
            self._drop_expired()
        if not self.keeps(window_start):
            return
        slot = (key, window_start)
        if value is None:
            if self._data.pop(slot, None) is not None:
                self._by_time.remove((window_start, key))
        else:
            if slot not in self._data:
                self._by_time.add((window_start, key))
            self._data[slot] = value

    def expired_by(self, window_start: int) -> list[tuple[bytes, int]]:
        self._check_open()
        below = (window_start - self._retention_ms + 1, b"")  # before every key at limit + 1
        return [
            (key, start)
            for start, key in self._by_time.irange(maximum=below, inclusive=(True, False))
        ]

    def _drop_expired(self) -> None:
        limit = self._expiry_limit()
        by_time = self._by_time
        while by_time and by_time[0][0] <= limit:
            window_start, key = by_time.pop(0)
            del self._data[(key, window_start)]

    def fetch(self, key: bytes, time_from: int, time_to: int) -> KeyValueIterator[int, bytes]:
        self._check_open()
        data = self._data
        slots = data.irange((key, time_from), (key, time_to))
        return KeyValueIterator([(slot[1], data[slot]) for slot in slots])

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator[Windowed[bytes], bytes]:
        self._check_open()
        size = self._window_size_ms
        data = self._data
        in_range = sorted(
            (key, start)
            for start, key in self._by_time.irange(
                (time_from, b""), (time_to + 1, b""), (True, False)
            )
        )
        return KeyValueIterator(
            [
                (Windowed(key, start, window_end(start, size)), data[(key, start)])
                for key, start in in_range
            ]
        )

    def approximate_num_entries(self) -> int:
        self._check_open()
        return len(self._data)

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        self._check_open()
        self.check_offsets(changelog_offsets)


def check_no_options(config: Mapping[str, Any], store: str) -> None:
    """The memory engine has no options: any given is a mistake worth naming."""
    if config:
        raise ValueError(
            f"store {store!r}: the memory engine takes no options, got {sorted(config)}"
        )


MEMORY_ENGINE = Engine(
    name="memory",
    key_value_store=MemoryKeyValueStore,
    window_store=MemoryWindowStore,
    persistent=False,
    description="sorted in-process stores; not persistent, rebuilt from the changelog",
    check_config=check_no_options,
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(MEMORY_ENGINE)
