"""The RocksDB key-value store: one database per store partition.

Data lives in the default column family; the `offsets` column family holds one 8-byte
offset per changelog partition (`"<topic>-<partition>"`), the encoded position under
`"position"` and the open/closed marker under `"status"`. A commit is one `WriteBatch`
across both column families, written through the WAL, so data, offsets and position
always come from the same commit.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from rocksdict import Rdict, WriteBatch

from iqstate.codec import (
    decode_position,
    encode_offset,
    encode_position,
    offset_key,
)
from iqstate.context import StateStoreContext
from iqstate.errors import CorruptStateError, StateDirectoryLockedError
from iqstate.persistent import (
    CLOSED,
    OPEN,
    POSITION_KEY,
    STATUS_KEY,
    Commit,
    Pair,
    PersistentKeyValueStore,
    StoredState,
)
from iqstate.persistent_window import PersistentWindowStore
from iqstate.position import Position
from iqstate_rocksdb.options import RocksDBSettings

OFFSETS_CF = "offsets"


def open_database(path: Path, settings: RocksDBSettings) -> Rdict:
    """Open (or create) a database with its offsets column family, with clear errors."""
    try:
        return Rdict(
            str(path),
            options=settings.db_options(),
            column_families={OFFSETS_CF: settings.offsets_options()},
        )
    except Exception as exc:
        message = str(exc)
        if "lock" in message.lower():
            raise StateDirectoryLockedError(
                f"RocksDB database {path} is locked by another process or open handle: {message}"
            ) from exc
        if "corruption" in message.lower() or "checksum" in message.lower():
            raise CorruptStateError(f"RocksDB database {path} is corrupt: {message}") from exc
        raise


class RocksDBKeyValueStore(PersistentKeyValueStore):
    kind = "rocksdb.key_value"
    atomic_commits = True  # one WriteBatch through the WAL per commit

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._db: Any = None
        self._offsets_cf: Any = None
        self._offsets_handle: Any = None
        self._settings = RocksDBSettings()

    @property
    def path(self) -> Path:
        return self.context.directory / "rocksdb"  # type: ignore[operator]

    def _open_storage(self, directory: Path, context: StateStoreContext) -> StoredState:
        self._settings = RocksDBSettings.from_config(context.config, store=self.name)
        db = open_database(directory / "rocksdb", self._settings)
        try:
            offsets_cf = db.get_column_family(OFFSETS_CF)
            handle = db.get_column_family_handle(OFFSETS_CF)
            stored = StoredState.from_entries(offsets_cf.items())
            mark = WriteBatch(raw_mode=True)
            mark.put(STATUS_KEY, OPEN, handle)
            db.write(mark, self._settings.write_options())
        except BaseException:
            db.close()
            raise
        self._db, self._offsets_cf, self._offsets_handle = db, offsets_cf, handle
        return stored

    def _close_storage(self, clean: bool) -> None:
        db, self._db = self._db, None
        if db is None:
            return
        try:
            if clean:
                mark = WriteBatch(raw_mode=True)
                mark.put(STATUS_KEY, CLOSED, self._offsets_handle)
                db.write(mark, self._settings.write_options())
        finally:
            self._offsets_cf = self._offsets_handle = None
            db.close()

    def _read(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def _scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool, upper_inclusive: bool
    ) -> list[Pair]:
        db = self._db
        if reverse:
            items = (
                db.items(backwards=True, from_key=upper)
                if upper is not None
                else db.items(backwards=True)
            )
            if upper is not None and not upper_inclusive:
                items = itertools.dropwhile(lambda pair: pair[0] >= upper, items)
            if lower is None:
                return list(items)
            return list(itertools.takewhile(lambda pair: pair[0] >= lower, items))
        items = db.items(from_key=lower) if lower is not None else db.items()
        if upper is None:
            return list(items)
        if upper_inclusive:
            return list(itertools.takewhile(lambda pair: pair[0] <= upper, items))
        return list(itertools.takewhile(lambda pair: pair[0] < upper, items))

    def _count(self) -> int:
        return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def _write(self, commit: Commit) -> None:
        batch = WriteBatch(raw_mode=True)
        for key, value in commit.changes.items():
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        handle = self._offsets_handle
        for partition in commit.removed_offsets:
            batch.delete(offset_key(partition), handle)
        for partition, offset in commit.offsets.items():
            batch.put(offset_key(partition), encode_offset(offset), handle)
        batch.put(POSITION_KEY, encode_position(commit.position), handle)
        self._db.write(batch, self._settings.write_options())

    def stored_position(self) -> Position:
        """The position as last committed (for tests and tools)."""
        data = self._offsets_cf.get(POSITION_KEY)
        return decode_position(data) if data is not None else Position.empty()


class RocksDBWindowStore(PersistentWindowStore):
    """Window store sharing the rocksdb key-value store's storage, commits and offsets."""

    kind = "rocksdb.window"
    key_value_class = RocksDBKeyValueStore
