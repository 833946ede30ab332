"""Opening a partition's SQLite database so that a lost or damaged one is refused.

A database is created whole: built in a staging directory (tables, a status marker, the
sealed format) and renamed into place. An existing directory is therefore always a
complete database, opened without the right to create one: a deleted or emptied
`store.db` is damage, where SQLite would quietly start a new, empty database.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from iqstate.errors import CorruptStateError, IqstateError
from iqstate.files import create_directory_whole
from iqstate.persistent import UNTRUSTED_REMEDY
from iqstate.sealing import FORMAT, seal
from iqstate.storage_failures import CAUSES, WRITE_CAUSES, storage_failure

DATABASE_FILE = "store.db"
STATUS, POSITION, OFFSET_PREFIX = "status", "position", "offset:"
OPEN, CLOSED = b"\x01", b"\x00"


def damaged(path: Path, what: str) -> CorruptStateError:
    """The error for a database iqstate must not trust: `what` says why."""
    return CorruptStateError(f"SQLite store {path} {what}. {UNTRUSTED_REMEDY}")


MACHINE_ERRORS = {
    "SQLITE_FULL": "the disk is full",
    "SQLITE_IOERR_SHMSIZE": "the shared-memory file could not grow (a full disk)",
    "SQLITE_IOERR_SHMOPEN": "the shared-memory file could not be opened",
    "SQLITE_IOERR_SHMMAP": "the shared-memory file could not be mapped",
    "SQLITE_IOERR_WRITE": "the disk did not take the write",
    "SQLITE_IOERR_FSYNC": "the disk did not take the write (fsync)",
    "SQLITE_IOERR_DIR_FSYNC": "the disk did not take the write (fsync)",
    "SQLITE_IOERR_TRUNCATE": "a file could not be truncated (a full disk)",
    "SQLITE_IOERR_NOMEM": "the process is out of memory",
    "SQLITE_READONLY": "this process may not write the database",
    "SQLITE_READONLY_DIRECTORY": "this process may not write the database's directory",
    "SQLITE_PERM": "this process may not use the database",
}
"""SQLite's extended result codes (`sqlite3.Error.sqlite_errorname`) that the machine
causes: more precise than the message, which says "disk I/O error" for a full disk's
shared-memory file and for a damaged read alike."""


def sqlite_error(path: Path, error: sqlite3.Error, *, writing: bool = False) -> IqstateError:
    """SQLite's error while using the database in `path` (`writing`: in a write
    transaction), naming it: the machine's (a full disk: `StateStorageError`), or damage
    (`CorruptStateError`)."""
    name = getattr(error, "sqlite_errorname", None) or ""
    if name.startswith("SQLITE_READONLY"):
        name = name if name in MACHINE_ERRORS else "SQLITE_READONLY"
    text = f"{name + ': ' if name else ''}{type(error).__name__}: {error}"
    if name.startswith("SQLITE_CANTOPEN"):
        text += why_not_opened(path)
    # With its code, an I/O error is told apart (a damaged read is not the machine's);
    # without one (an older SQLite), any in a write transaction counts as the machine's.
    causes = {**CAUSES, **MACHINE_ERRORS} if name else WRITE_CAUSES if writing else CAUSES
    failure = storage_failure(f"SQLite store {path} failed", text, causes)
    return failure if failure is not None else damaged(path, f"cannot be read: {text}")


def why_not_opened(path: Path) -> str:
    """What the operating system says opening the database's files read-write, where it
    refuses: SQLite's `SQLITE_CANTOPEN` names no cause, and a file this process may not
    open (permissions, a read-only file system, no file descriptors left) is not damage."""
    for name in (DATABASE_FILE, f"{DATABASE_FILE}-wal", f"{DATABASE_FILE}-shm"):
        try:
            os.close(os.open(path / name, os.O_RDWR))
        except FileNotFoundError:
            continue  # the database file's absence is checked before opening
        except OSError as error:
            return f" ({name}: {error.strerror})"
    return ""


PAGE_SIZE = 16_384
"""Bytes a page: the `data` table keeps whole rows in its B-tree pages (`WITHOUT ROWID`),
and a row over about a quarter page (1,000 bytes at SQLite's default 4,096) spills into
an overflow page, one more page read per lookup: a versioned store's timeline of ten
100-byte versions did. At 16 KiB rows up to about 4,000 bytes stay in their page."""


def create_database(path: Path) -> None:
    """Create the database in `path` unless the directory exists (then it is kept)."""
    if not path.exists():
        try:
            create_directory_whole(path, _build)
        except sqlite3.Error as error:  # nothing was there to lose: a machine's error
            raise sqlite_error(path, error, writing=True) from error
        except OSError as error:
            failure = storage_failure(f"SQLite store {path} could not be created", str(error))
            if failure is None:
                raise
            raise failure from error


def _build(staging: Path) -> None:
    db = sqlite3.connect(staging / DATABASE_FILE, isolation_level=None)
    try:
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before anything is written
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE data (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
        db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)")
        db.execute("INSERT INTO meta VALUES (?, ?)", (STATUS, seal(STATUS.encode(), CLOSED)))
        db.execute("INSERT INTO meta VALUES (?, ?)", ("format", FORMAT))
    finally:
        db.close()


def open_database(path: Path, *, sync: bool) -> sqlite3.Connection:
    """Open the existing database in `path` read-write, never creating one."""
    file = path / DATABASE_FILE
    try:
        size = file.stat().st_size
    except FileNotFoundError:
        raise damaged(path, f"has no {DATABASE_FILE} (it was deleted)") from None
    if size == 0:
        raise damaged(path, f"has an empty {DATABASE_FILE} (it was emptied)")
    try:
        db = sqlite3.connect(
            f"file:{file}?mode=rw", uri=True, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as error:
        raise sqlite_error(path, error) from error
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if sync else 'NORMAL'}")
    except sqlite3.Error as error:
        db.close()
        raise sqlite_error(path, error) from error
    return db
