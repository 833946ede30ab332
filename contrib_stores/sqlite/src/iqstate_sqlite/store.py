"""The `sqlite` engine's stores: one SQLite database per store partition.

Tables: `data(key BLOB PRIMARY KEY, value BLOB)` and `meta(name TEXT PRIMARY KEY, value
BLOB)` holding `offset:<topic>-<partition>`, `position` and `status`. A commit is one
transaction (`PRAGMA synchronous=FULL` when the store syncs commits). A missing, empty or
damaged database, or one whose meta table lost its status or position, is refused with
`CorruptStateError` naming it (`iqstate_sqlite.database`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path
from typing import Any

from iqstate.codec import decode_offset, decode_position, encode_offset, encode_position
from iqstate.context import StateStoreContext
from iqstate.persistent import Commit, Pair, PersistentKeyValueStore, StoredState
from iqstate.persistent_window import PersistentWindowStore
from iqstate.position import TopicPartition
from iqstate.runtime.lock import DirectoryLock
from iqstate.sealing import FORMAT, seal, unseal
from iqstate_sqlite import KEY_VALUE_KIND
from iqstate_sqlite.database import (
    CLOSED,
    OFFSET_PREFIX,
    OPEN,
    POSITION,
    STATUS,
    create_database,
    damaged,
    open_database,
    sqlite_error,
)
from iqstate_sqlite.options import SQLiteSettings

FORMAT_NAME = "format"


class SQLiteKeyValueStore(PersistentKeyValueStore):
    kind = KEY_VALUE_KIND
    atomic_commits = True  # one transaction per commit

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._db: sqlite3.Connection | None = None
        self._using = threading.Lock()
        """Held around every use of `_db`: one connection serves every thread, and a
        transaction or a close must not interleave with another thread's statement (a
        close during one kills the process)."""
        self._lock: DirectoryLock | None = None
        self._path = Path()

    @property
    def syncs_commits(self) -> bool:
        """Whether each commit is fsynced before it returns (`PRAGMA synchronous=FULL`)."""
        return bool(self._fetch("PRAGMA synchronous")[0][0] == 2)

    def _fetch(self, sql: str, parameters: Any = ()) -> list[Any]:
        """The rows of one statement, run alone on the connection."""
        using = self._using
        using.acquire()
        try:
            return self._connection().execute(sql, parameters).fetchall()
        except sqlite3.Error as error:
            raise sqlite_error(self._path, error) from error
        finally:
            using.release()

    def _connection(self) -> sqlite3.Connection:
        """The open connection (the caller holds `_using`); a store closed by another
        thread since the caller began raises the closed-store error."""
        if self._db is None:
            raise self._closed_error()
        return self._db

    def _open_storage(self, directory: Path, context: StateStoreContext) -> StoredState:
        settings = SQLiteSettings.from_config(context.config, store=self.name)
        path = directory / "sqlite"
        create_database(path)
        lock = DirectoryLock(path)
        lock.acquire()
        try:
            db = open_database(path, sync=settings.syncs(context.sync_commits))
        except BaseException:
            lock.release()
            raise
        try:
            stored = self._read_meta(db, path)
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (STATUS, _meta(STATUS, OPEN)))
        except BaseException as error:
            db.close()
            lock.release()
            if isinstance(error, sqlite3.Error):
                raise sqlite_error(path, error) from error
            raise
        self._db, self._lock, self._path = db, lock, path
        return stored

    @staticmethod
    def _read_meta(db: sqlite3.Connection, path: Path) -> StoredState:
        """Offsets, position and status; refuses a meta table that lost them."""
        marker = dict(
            db.execute("SELECT name, value FROM meta WHERE name IN (?, ?)", (FORMAT_NAME, STATUS))
        )
        if marker.get(FORMAT_NAME) != FORMAT and STATUS in marker:
            if marker[STATUS] not in (OPEN, CLOSED):  # a sealed status: written sealed
                raise damaged(path, "lost the marker of its record format")
            _seal_existing(db)
        stored = StoredState()
        names = set()
        for name, value in db.execute(
            "SELECT name, value FROM meta WHERE name != ?", (FORMAT_NAME,)
        ):
            names.add(name)
            value = checked(path, name.encode(), value)
            if name == STATUS:
                stored.was_open = value == OPEN
            elif name == POSITION:
                stored.position = decode_position(value)
            elif name.startswith(OFFSET_PREFIX):
                topic, _, partition = name[len(OFFSET_PREFIX) :].rpartition("-")
                stored.offsets[TopicPartition(topic, int(partition))] = decode_offset(value)
        if STATUS not in names:
            raise damaged(path, "has no status marker: its meta table lost its state")
        holds_data = db.execute("SELECT EXISTS (SELECT 1 FROM data)").fetchone()[0]
        if holds_data and POSITION not in names:
            raise damaged(path, "holds data but no committed position: its offsets were lost")
        return stored

    def _close_storage(self, clean: bool) -> None:
        with self._using:
            self._close_connection(clean)

    def _close_connection(self, clean: bool) -> None:
        db, self._db = self._db, None
        try:
            if db is not None:
                try:
                    if clean:
                        closed = (STATUS, _meta(STATUS, CLOSED))
                        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", closed)
                finally:
                    db.close()
        except sqlite3.Error as error:  # a full disk fails the status mark
            raise sqlite_error(self._path, error, writing=True) from error
        finally:
            lock, self._lock = self._lock, None
            if lock is not None:
                lock.release()

    def _read(self, key: bytes) -> bytes | None:
        rows = self._fetch("SELECT value FROM data WHERE key = ?", (key,))
        if not rows:
            self._check_neighbours(key)
            return None
        return checked(self._path, key, rows[0][0])

    def _check_neighbours(self, key: bytes) -> None:
        """Check the records around a missing key: a key whose stored bytes were damaged is
        missing too, and its record, with its checksum, sits where the key would be."""
        rows = self._fetch(
            "SELECT * FROM (SELECT key, value FROM data WHERE key < ? ORDER BY key DESC "
            "LIMIT 1) UNION ALL SELECT * FROM (SELECT key, value FROM data WHERE key > ? "
            "ORDER BY key LIMIT 1)",
            (key, key),
        )
        for neighbour, value in rows:
            checked(self._path, blob(self._path, neighbour), value)

    def _scan(
        self, lower: bytes | None, upper: bytes | None, reverse: bool, upper_inclusive: bool
    ) -> list[Pair]:
        return self._scan_limited(lower, upper, reverse, upper_inclusive, None)

    def _scan_limited(
        self,
        lower: bytes | None,
        upper: bytes | None,
        reverse: bool,
        upper_inclusive: bool,
        limit: int | None,
    ) -> list[Pair]:
        """The range's pairs in order, or its first `limit` (SQL's `LIMIT`)."""
        clauses: list[str] = []
        parameters: list[bytes | int] = []
        if lower is not None:
            clauses.append("key >= ?")
            parameters.append(lower)
        if upper is not None:
            clauses.append("key <= ?" if upper_inclusive else "key < ?")
            parameters.append(upper)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "DESC" if reverse else "ASC"
        limited = ""
        if limit is not None:
            limited = " LIMIT ?"
            parameters.append(limit)
        path = self._path
        rows = self._fetch(
            f"SELECT key, value FROM data {where} ORDER BY key {order}{limited}", parameters
        )
        return [(blob(path, key), checked(path, key, value)) for key, value in rows]

    def _count(self) -> int:
        return int(self._fetch("SELECT COUNT(*) FROM data")[0][0])

    def _write(self, commit: Commit) -> None:
        with self._using:  # no other thread's statement inside the transaction
            db = self._connection()
            try:
                self._transaction(db, commit)
            except sqlite3.Error as error:
                raise sqlite_error(self._path, error, writing=True) from error

    def _transaction(self, db: sqlite3.Connection, commit: Commit) -> None:
        offsets = [(f"{OFFSET_PREFIX}{tp}", o) for tp, o in commit.offsets.items()]
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(
                "INSERT OR REPLACE INTO data VALUES (?, ?)",
                [(k, seal(k, v)) for k, v in commit.changes.items() if v is not None],
            )
            db.executemany(
                "DELETE FROM data WHERE key = ?",
                [(k,) for k, v in commit.changes.items() if v is None],
            )
            db.executemany(
                "DELETE FROM meta WHERE name = ?",
                [(f"{OFFSET_PREFIX}{tp}",) for tp in commit.removed_offsets],
            )
            db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [(name, _meta(name, encode_offset(offset))) for name, offset in offsets]
                + [(POSITION, _meta(POSITION, encode_position(commit.position)))],
            )
            db.execute("COMMIT")
        except BaseException:
            _roll_back(db)
            raise

    def storage_stats(self) -> dict[str, int]:
        ((entries, key_bytes, value_bytes),) = self._fetch(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(key)), 0), "
            "COALESCE(SUM(LENGTH(value) - 4), 0) FROM data"
        )
        return {
            "entries": int(entries),
            "key_bytes": int(key_bytes),
            "value_bytes": int(value_bytes),
        }


def _meta(name: str, value: bytes) -> bytes:
    """A meta row's value as stored: sealed with its name."""
    return seal(name.encode(), value)


def blob(path: Path, stored: object) -> bytes:
    """A stored key or value: SQLite returns a damaged type byte as text or a number."""
    if type(stored) is not bytes:
        raise damaged(path, f"holds a {type(stored).__name__} where a blob belongs")
    return stored


def checked(path: Path, key: bytes, stored: object) -> bytes:
    """The value sealed in `stored` under `key`, or `CorruptStateError` when it is damaged."""
    value = unseal(key, blob(path, stored))
    if value is None:
        raise damaged(path, f"holds a damaged record (key {key[:40].hex()}...)")
    return value


def _seal_existing(db: sqlite3.Connection) -> None:
    """Seal every value of a database written before values carried checksums."""
    db.execute("BEGIN IMMEDIATE")
    try:
        rows = db.execute("SELECT key, value FROM data").fetchall()
        db.executemany(
            "UPDATE data SET value = ? WHERE key = ?", [(seal(k, v), k) for k, v in rows]
        )
        rows = db.execute("SELECT name, value FROM meta").fetchall()
        db.executemany(
            "UPDATE meta SET value = ? WHERE name = ?", [(_meta(n, v), n) for n, v in rows]
        )
        db.execute("INSERT INTO meta VALUES (?, ?)", (FORMAT_NAME, FORMAT))
        db.execute("COMMIT")
    except BaseException:
        _roll_back(db)
        raise


def _roll_back(db: sqlite3.Connection) -> None:
    """Roll back a failed transaction, unless SQLite has already (a full disk does): the
    error that failed it is the one to raise, not the ROLLBACK's."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


class SQLiteWindowStore(PersistentWindowStore):
    kind = "sqlite.window"
    key_value_class = SQLiteKeyValueStore
