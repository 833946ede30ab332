"""The `sqlite` engine: a persistent key-value (and window) engine on sqlite3.

Tables: `data(key BLOB PRIMARY KEY, value BLOB)` and `meta(name TEXT PRIMARY KEY, value
BLOB)` holding `offset:<topic>-<partition>`, `position` and `status`. A commit is one
transaction. `StorageStatsQuery` is answered with SQL aggregates, by this engine only.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from iqstate import Engine, PositionBound, Query, QueryConfig, QueryResult
from iqstate.codec import decode_offset, decode_position, encode_offset, encode_position
from iqstate.context import StateStoreContext
from iqstate.errors import CorruptStateError
from iqstate.hookspecs import hookimpl
from iqstate.persistent import Commit, Pair, PersistentKeyValueStore, StoredState
from iqstate.persistent_window import PersistentWindowStore
from iqstate.position import TopicPartition
from iqstate.runtime.lock import DirectoryLock
from iqstate.store_handlers import key_value_handlers, window_handlers

OPEN, CLOSED = b"\x01", b"\x00"


class StorageStatsQuery(Query[dict[str, int]]):
    """Committed entries and bytes of a partition: `{"entries", "key_bytes", "value_bytes"}`."""

    __slots__ = ()


class SQLiteKeyValueStore(PersistentKeyValueStore):
    kind = "sqlite.key_value"
    atomic_commits = True  # one transaction per commit

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._db: sqlite3.Connection | None = None
        self._lock: DirectoryLock | None = None

    @property
    def db(self) -> sqlite3.Connection:
        assert self._db is not None, "not open"
        return self._db

    def _open_storage(self, directory: Path, context: StateStoreContext) -> StoredState:
        if context.config:
            raise ValueError(
                f"store {self.name!r}: the sqlite engine takes no options, "
                f"got {dict(context.config)}"
            )
        lock = DirectoryLock(directory / "sqlite")
        lock.acquire()
        try:
            db = sqlite3.connect(
                directory / "sqlite" / "store.db", isolation_level=None, check_same_thread=False
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS data "
                "(key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)"
            )
            stored = StoredState()
            for name, value in db.execute("SELECT name, value FROM meta"):
                if name == "status":
                    stored.was_open = value == OPEN
                elif name == "position":
                    stored.position = decode_position(value)
                elif name.startswith("offset:"):
                    topic, _, partition = name[len("offset:") :].rpartition("-")
                    stored.offsets[TopicPartition(topic, int(partition))] = decode_offset(value)
            db.execute("INSERT OR REPLACE INTO meta VALUES ('status', ?)", (OPEN,))
        except sqlite3.DatabaseError as exc:
            lock.release()
            raise CorruptStateError(
                f"SQLite store {directory / 'sqlite'} cannot be opened: {exc}"
            ) from exc
        self._db, self._lock = db, lock
        return stored

    def _close_storage(self, clean: bool) -> None:
        db, self._db = self._db, None
        try:
            if db is not None:
                if clean:
                    db.execute("INSERT OR REPLACE INTO meta VALUES ('status', ?)", (CLOSED,))
                db.close()
        finally:
            lock, self._lock = self._lock, None
            if lock is not None:
                lock.release()

    def _read(self, key: bytes) -> bytes | None:
        row = self.db.execute("SELECT value FROM data WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def _scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool, upper_inclusive: bool
    ) -> list[Pair]:
        clauses, parameters = [], []
        if lower is not None:
            clauses.append("key >= ?")
            parameters.append(lower)
        if upper is not None:
            clauses.append("key <= ?" if upper_inclusive else "key < ?")
            parameters.append(upper)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "DESC" if reverse else "ASC"
        rows = self.db.execute(
            f"SELECT key, value FROM data {where} ORDER BY key {order}", parameters
        )
        return [(bytes(key), bytes(value)) for key, value in rows]

    def _count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM data").fetchone()[0])

    def _write(self, commit: Commit) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(
                "INSERT OR REPLACE INTO data VALUES (?, ?)",
                [(k, v) for k, v in commit.changes.items() if v is not None],
            )
            db.executemany(
                "DELETE FROM data WHERE key = ?",
                [(k,) for k, v in commit.changes.items() if v is None],
            )
            db.executemany(
                "DELETE FROM meta WHERE name = ?",
                [(f"offset:{tp}",) for tp in commit.removed_offsets],
            )
            db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [(f"offset:{tp}", encode_offset(o)) for tp, o in commit.offsets.items()]
                + [("position", encode_position(commit.position))],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def storage_stats(self) -> dict[str, int]:
        entries, key_bytes, value_bytes = self.db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(key)), 0), "
            "COALESCE(SUM(LENGTH(value)), 0) FROM data"
        ).fetchone()
        return {
            "entries": int(entries),
            "key_bytes": int(key_bytes),
            "value_bytes": int(value_bytes),
        }


class SQLiteWindowStore(PersistentWindowStore):
    kind = "sqlite.window"
    key_value_class = SQLiteKeyValueStore


def answer_storage_stats(
    store: SQLiteKeyValueStore, query: StorageStatsQuery, bound: PositionBound, config: QueryConfig
) -> QueryResult[dict[str, int]]:
    """Committed entries and bytes; the uncommitted overlay is not counted."""
    return QueryResult.for_result(store.storage_stats())


SQLITE_ENGINE = Engine(
    name="sqlite",
    key_value_store=SQLiteKeyValueStore,
    window_store=SQLiteWindowStore,
    persistent=True,
    description="SQLite (sqlite3): one database per partition, offsets in the same transaction",
)


@hookimpl
def iqstate_register_engines(register: Any) -> None:
    register(SQLITE_ENGINE)


@hookimpl
def iqstate_register_query_handlers(register: Any) -> None:
    for query_type, handler in key_value_handlers().items():
        register(query_type, SQLiteKeyValueStore.kind, handler)
    for query_type, handler in window_handlers().items():
        register(query_type, SQLiteWindowStore.kind, handler)
    register(StorageStatsQuery, SQLiteKeyValueStore.kind, answer_storage_stats)
