"""A small persistent engine for runtime tests: whole-store snapshots written atomically.

Every `commit` writes the data, offsets and position to a temporary file, fsyncs it and
renames it over `snapshot.json`, so a crash at any instant leaves the previous or the new
commit, never a mix. Slow for big stores, and exactly right for testing what the runtime
does with persistence: reopen, replay, legacy offset files and crashes. Two engines:

* `snapshot`: manages its offsets and position (KIP-1035);
* `snapshot-legacy`: persists only data, so the runtime keeps `.checkpoint` / `.position`.

`FAULTS` lets a test make one partition's next commit fail, as a crash between the
partitions of a batch would.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sortedcontainers import SortedDict

from iqstate import Engine, EngineStore, KeyValueIterator, KeyValueStore, Position, TopicPartition
from iqstate.context import StateStoreContext
from iqstate.engine_store import apply_offset_changes
from iqstate.hookspecs import hookimpl
from iqstate.keyspace import prefix_upper_bound
from iqstate.store_handlers import key_value_handlers

FAULTS: dict[tuple[str, int], BaseException] = {}
"""`(store, partition) -> exception` raised by that partition's next commit."""

SNAPSHOT = "snapshot.json"


class SnapshotKeyValueStore(EngineStore, KeyValueStore[bytes, bytes]):
    kind = "snapshot.key_value"
    persistent = True
    atomic_commits = True  # the snapshot file is replaced by one rename
    keeps_offsets = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._data: SortedDict = SortedDict()
        self._offsets: dict[TopicPartition, int] = {}

    @property
    def manages_offsets(self) -> bool:
        return self.keeps_offsets

    def _path(self) -> Path:
        directory = self.context.directory
        assert directory is not None, "a persistent store needs a directory"
        return directory / SNAPSHOT

    def init(self, context: StateStoreContext) -> None:
        super().init(context)
        self._data = SortedDict()
        self._offsets = {}
        path = self._path()
        if not path.exists():
            return
        snapshot = json.loads(path.read_text())
        self._data.update((bytes.fromhex(k), bytes.fromhex(v)) for k, v in snapshot["data"])
        if self.keeps_offsets:
            self._offsets = {TopicPartition(t, p): o for t, p, o in snapshot["offsets"]}
            position = {
                t: {int(p): o for p, o in offsets.items()}
                for t, offsets in snapshot["position"].items()
            }
            self.current_position = Position.from_map(position)

    def close(self) -> None:
        super().close()
        self._data = SortedDict()

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        value: bytes | None = self._data.get(key)
        return value

    def put(self, key: bytes, value: bytes | None) -> None:
        self._check_open()
        if value is None:
            self._data.pop(key, None)
        else:
            self._data[key] = value

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: bytes) -> bytes | None:
        self._check_open()
        old: bytes | None = self._data.pop(key, None)
        return old

    def _items(
        self, lower: bytes | None, upper: bytes | None, reverse: bool, inclusive: bool = True
    ) -> KeyValueIterator[bytes, bytes]:
        self._check_open()
        keys = self._data.irange(lower, upper, inclusive=(True, inclusive), reverse=reverse)
        return KeyValueIterator([(k, self._data[k]) for k in keys])

    def range(self, lower: bytes | None, upper: bytes | None) -> KeyValueIterator[bytes, bytes]:
        return self._items(lower, upper, False)

    def reverse_range(
        self, lower: bytes | None, upper: bytes | None
    ) -> KeyValueIterator[bytes, bytes]:
        return self._items(lower, upper, True)

    def prefix_scan(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        return self._items(prefix, prefix_upper_bound(prefix), False, inclusive=False)

    def approximate_num_entries(self) -> int:
        self._check_open()
        return len(self._data)

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None:
        self._check_open()
        self.check_offsets(changelog_offsets)
        fault = FAULTS.pop((self.name, self.context.partition), None)
        if fault is not None:
            raise fault
        offsets = dict(self._offsets)
        apply_offset_changes(offsets, changelog_offsets)
        snapshot = {
            "data": [[k.hex(), v.hex()] for k, v in self._data.items()],
            "offsets": [[tp.topic, tp.partition, o] for tp, o in offsets.items()]
            if self.keeps_offsets
            else [],
            "position": self.current_position.to_map() if self.keeps_offsets else {},
        }
        path = self._path()
        temporary = path.with_suffix(".tmp")
        with open(temporary, "w") as handle:
            json.dump(snapshot, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        if self.keeps_offsets:
            self._offsets = offsets

    def committed_offset(self, partition: TopicPartition) -> int | None:
        return self._offsets.get(partition) if self.keeps_offsets else None


class LegacySnapshotKeyValueStore(SnapshotKeyValueStore):
    kind = "snapshot-legacy.key_value"
    atomic_commits = False  # the runtime writes its offset files after the data
    keeps_offsets = False


SNAPSHOT_ENGINE = Engine("snapshot", SnapshotKeyValueStore, persistent=True)
LEGACY_SNAPSHOT_ENGINE = Engine("snapshot-legacy", LegacySnapshotKeyValueStore, persistent=True)


class SnapshotPlugin:
    """Registers both engines and the built-in handlers for their store kinds."""

    @hookimpl
    def iqstate_register_engines(self, register: Any) -> None:
        register(SNAPSHOT_ENGINE)
        register(LEGACY_SNAPSHOT_ENGINE)

    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        for kind in (SnapshotKeyValueStore.kind, LegacySnapshotKeyValueStore.kind):
            for query_type, handler in key_value_handlers().items():
                register(query_type, kind, handler)


def registry_with_snapshot_engines() -> Any:
    from iqstate.plugins import PluginRegistry, make_plugin_manager

    manager = make_plugin_manager(
        load_entry_points=False, extra_plugins=[("snapshot", SnapshotPlugin())]
    )
    return PluginRegistry.from_plugin_manager(manager)
