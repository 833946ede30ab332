"""`KeySpaceStore`: a store type built on an engine's key-value store over bytes.

A versioned or session store keeps its data in key spaces (a leading byte) of one
key-value store of the engine, so it inherits that store's atomic commits, changelog
offsets, position and open/closed marker: every engine that has key-value stores has these
types too, with its crash guarantees. Timestamps in keys are 8 order-preserving bytes
(`iqstate.keyspace`), and a key is stored with its length in front where a scan must stop
at exactly one key's entries.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from iqstate.context import StateStoreContext
from iqstate.engine_store import EngineStore
from iqstate.keyspace import prefix_upper_bound
from iqstate.position import Position, TopicPartition
from iqstate.serdes import Serdes
from iqstate.store import KeyValueStore
from iqstate.times import MAX_MS, MIN_MS

_LENGTH = struct.Struct(">I")
_time = Serdes.int64()  # 8 order-preserving bytes


def insert_all(
    entries: Iterable[tuple[Any, ...]],
    insert: Callable[..., bool],
    drop_expired: Callable[[], None],
) -> None:
    """`insert(*entry)` for each of `entries` in order (True: what the store holds may have
    expired), then `drop_expired()` once if any said so, even when one raised: a store with
    a retention applies a `put_all` this way. A drop scans an index, and a drop per put
    made a batch of puts at rising times cost a scan per put."""
    expiring = False
    try:
        for entry in entries:
            expiring = insert(*entry) or expiring
    finally:
        if expiring:
            drop_expired()


def length_prefixed(key: bytes) -> bytes:
    """`key` with its length in 4 bytes in front: a scan of one key's entries then stops
    at them exactly, whatever other keys start with it."""
    return _LENGTH.pack(len(key)) + key


def split_length_prefixed(data: bytes) -> tuple[bytes, bytes]:
    """The key `length_prefixed` put at the front of `data`, and the bytes after it."""
    length = _LENGTH.unpack_from(data)[0]
    return data[4 : 4 + length], data[4 + length :]


class KeySpaceStore(EngineStore):
    """The lifecycle, position and commits of a store type kept in `key_value_store`."""

    def __init__(self, key_value_store: KeyValueStore[bytes, bytes]) -> None:
        super().__init__(key_value_store.name)
        self.key_value_store = key_value_store
        """The engine's store holding this store's data (a crash test abandons it)."""

    def index_between(self, prefix: bytes, time_from: int, time_to: int) -> list[bytes]:
        """The keys of the index in the key space `prefix` (`prefix + time + rest`: the
        time as 8 order-preserving bytes) with a time in `[time_from, time_to]`, in key
        order: each time's keys whatever their rest (0xff and more included), nothing of
        the next key space."""
        if time_from > time_to or time_to < MIN_MS or time_from > MAX_MS:
            return []
        lower = prefix + _time.serialize(max(time_from, MIN_MS))
        upper = (
            prefix_upper_bound(prefix)  # the next key space's first key
            if time_to >= MAX_MS
            else prefix + _time.serialize(time_to + 1)
        )
        start, end = len(prefix), len(prefix) + 8
        found = []
        with self.key_value_store.range(lower, upper) as entries:
            for key, _ in entries:  # the bounds are inclusive: a key at either may be out
                in_space = key.startswith(prefix) and len(key) >= end
                if in_space and time_from <= _time.deserialize(key[start:end]) <= time_to:
                    found.append(key)
        return found

    @property
    def persistent(self) -> bool:
        return self.key_value_store.persistent

    @property
    def manages_offsets(self) -> bool:
        return self.key_value_store.manages_offsets

    @property
    def atomic_commits(self) -> bool:
        return self.key_value_store.atomic_commits

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        try:
            self.key_value_store.init(context)
        except BaseException:
            self._open = False
            raise
        self.current_position = self.key_value_store.position
        self.opened()

    def opened(self) -> None:
        """Read what the store type keeps beside its data (a subclass's stream time)."""

    def close(self) -> None:
        if self._open:
            self.key_value_store.close()
        super().close()

    def settle(self) -> None:
        """Settle the key-value store that holds this store's data."""
        self.key_value_store.settle()

    def update_position(self, position: Position) -> None:
        self._check_open()
        self.key_value_store.update_position(position)
        self.current_position = self.key_value_store.position

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        self._check_open()
        try:
            self.key_value_store.commit(changelog_offsets)
        except BaseException:
            # The engine discarded the uncommitted writes (a full disk): what this store
            # keeps of them in memory goes back to the committed state too, its position
            # and what `opened` reads (a stream time), or a retry of the same records
            # would find them applied.
            self.current_position = self.key_value_store.position
            self.opened()
            raise

    def committed_offset(self, partition: TopicPartition) -> int | None:
        return self.key_value_store.committed_offset(partition)
