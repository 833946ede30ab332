"""The engine's store: one SQLite database per store partition.

`PersistentKeyValueStore` gives the store contract (uncommitted writes in an overlay,
KIP-1035 offsets, the open/closed marker, legacy file migration); this class writes only
the storage primitives: open, read one key, scan a range, count, write one commit, close.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from iqstate.codec import encode_offset, encode_position, offset_key
from iqstate.context import StateStoreContext
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
from iqstate_{{ cookiecutter.underscored }}.plugin import KIND, WINDOW_KIND


class {{ cookiecutter.class_prefix }}Store(PersistentKeyValueStore):
    kind = KIND
    atomic_commits = True
    """`_write` is one SQLite transaction: after a crash the files hold exactly the last
    commit, so the store is used as it is (no rebuild, no `UncleanShutdownError`)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._db: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        assert self._db is not None, "not open"
        return self._db

    def _open_storage(self, directory: Path, context: StateStoreContext) -> StoredState:
        db = sqlite3.connect(directory / "store.db", isolation_level=None, check_same_thread=False)
        # Write-ahead logging: a commit that power loss interrupts is rolled back, never
        # half-applied, at every `synchronous` level (in SQLite's rollback-journal mode
        # NORMAL can corrupt the file). `sync_commits`: the runtime asks for commits that
        # survive power loss (exactly-once without a changelog: the store is the only
        # copy); NORMAL may lose the last commits then, FULL does not.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if context.sync_commits else 'NORMAL'}")
        db.execute("CREATE TABLE IF NOT EXISTS data (key BLOB PRIMARY KEY, value BLOB NOT NULL)")
        # `meta` holds the offsets key space as Kafka's RocksDB store lays out its offsets
        # column family (`offset_key(partition)`, `POSITION_KEY`, `STATUS_KEY`), which
        # `StoredState.from_entries` reads.
        db.execute("CREATE TABLE IF NOT EXISTS meta (name BLOB PRIMARY KEY, value BLOB NOT NULL)")
        rows = db.execute("SELECT name, value FROM meta")
        stored = StoredState.from_entries((bytes(name), bytes(value)) for name, value in rows)
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (STATUS_KEY, OPEN))
        self._db = db
        return stored

    def _close_storage(self, clean: bool) -> None:
        db, self._db = self._db, None
        if db is not None:
            if clean:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (STATUS_KEY, CLOSED))
            db.close()

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
        rows = self.db.execute(f"SELECT key, value FROM data {where} ORDER BY key {order}", parameters)
        return [(bytes(key), bytes(value)) for key, value in rows]

    def _count(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM data").fetchone()[0])

    def _write(self, commit: Commit) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            for key, value in commit.changes.items():
                if value is None:
                    db.execute("DELETE FROM data WHERE key = ?", (key,))
                else:
                    db.execute("INSERT OR REPLACE INTO data VALUES (?, ?)", (key, value))
            for partition in commit.removed_offsets:
                db.execute("DELETE FROM meta WHERE name = ?", (offset_key(partition),))
            for partition, offset in commit.offsets.items():
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (offset_key(partition), encode_offset(offset)))
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (POSITION_KEY, encode_position(commit.position)))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


class {{ cookiecutter.class_prefix }}WindowStore(PersistentWindowStore):
    """Window stores kept in the key-value store's key spaces: its commits, offsets and
    crash guarantees come with it. Write a class of your own for a layout of your own."""

    kind = WINDOW_KIND
    key_value_class = {{ cookiecutter.class_prefix }}Store
