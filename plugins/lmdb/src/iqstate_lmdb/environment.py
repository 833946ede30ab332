"""Opening a partition's LMDB environment so that damage is refused, never served or fatal.

* An environment is created whole: built in a staging directory (sub-databases, a status
  marker, the sealed format) and renamed into place. An existing directory is therefore always a
  complete environment, and a missing or empty `data.mdb` in it is damage: LMDB itself
  would quietly initialise a new, empty environment there.
* LMDB maps `data.mdb` into memory and trusts it. A page past the end of a truncated file
  is a bus error that kills the process on the first read, so the file must be at least as
  long as the last page the environment's meta page records; this is checked before any
  page beyond the meta pages is touched.
* LMDB's own errors (`MDB_CORRUPTED`, `MDB_PAGE_NOTFOUND`, `MDB_INVALID`, ...) become
  `CorruptStateError` naming the environment and what to do; a write that the machine
  refused (a full disk) becomes `StateStorageError`: the environment keeps its last commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb

from iqstate.errors import CorruptStateError, IqstateError, StateStorageError
from iqstate.files import create_directory_whole
from iqstate.persistent import CLOSED, STATUS_KEY, UNTRUSTED_REMEDY
from iqstate.sealing import FORMAT, FORMAT_KEY, seal
from iqstate.storage_failures import CAUSES, WRITE_CAUSES, storage_failure

DATA_DB, OFFSETS_DB = b"data", b"offsets"
DATA_FILE = "data.mdb"


def damaged(path: Path, what: str) -> CorruptStateError:
    """The error for an environment iqstate must not trust: `what` says why."""
    return CorruptStateError(f"LMDB environment {path} {what}. {UNTRUSTED_REMEDY}")


def lmdb_error(path: Path, error: lmdb.Error) -> IqstateError:
    """LMDB's error while using the environment at `path`, naming it: damage, or, when the
    reader table is full (more read transactions at once than `max_readers`), the load."""
    if isinstance(error, lmdb.ReadersFullError):
        return StateStorageError(
            f"LMDB environment {path}: more read transactions at once than its reader "
            f"table holds ({error}); nothing is damaged: read from fewer threads at once, "
            "or raise the store's max_readers option"
        )
    return damaged(path, f"cannot be read: {type(error).__name__}: {error}")


def write_error(path: Path, error: lmdb.Error) -> IqstateError:
    """LMDB's error in a write transaction of the environment at `path`: the machine's
    (`StateStorageError`), or damage it met (`CorruptStateError`)."""
    what = f"LMDB environment {path} failed to commit"
    failure = storage_failure(what, f"{type(error).__name__}: {error}", WRITE_CAUSES)
    return failure if failure is not None else lmdb_error(path, error)


def create_environment(path: Path, *, map_size: int, max_readers: int) -> None:
    """Create the environment at `path` unless its directory exists (then it is kept)."""
    if not path.exists():
        _create(path, map_size=map_size, max_readers=max_readers)


def open_environment(path: Path, *, map_size: int, max_readers: int, sync: bool) -> Any:
    """Open the existing environment at `path`, refusing a missing, empty or short file."""
    data_file = path / DATA_FILE
    try:
        size = data_file.stat().st_size
    except FileNotFoundError:
        raise damaged(path, f"has no {DATA_FILE} (it was deleted)") from None
    if size == 0:
        raise damaged(path, f"has an empty {DATA_FILE} (it was emptied)")
    env = _open(path, map_size=map_size, max_readers=max_readers, sync=sync)
    try:
        needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    except lmdb.Error as error:
        env.close()
        raise lmdb_error(path, error) from error
    if size < needed:
        env.close()
        raise damaged(
            path,
            f"is truncated: {DATA_FILE} has {size} bytes but its last committed page ends at "
            f"byte {needed}",
        )
    return env


def _open(path: Path, *, map_size: int, max_readers: int, sync: bool) -> Any:
    try:
        return lmdb.open(
            str(path),
            map_size=map_size,
            max_dbs=2,
            max_readers=max_readers,
            sync=sync,
            metasync=sync,
            readahead=False,
        )
    except lmdb.Error as error:  # a read-only file or a full disk, or damage
        text = f"{type(error).__name__}: {error}"
        failure = storage_failure(f"LMDB environment {path} failed to open", text, CAUSES)
        raise (failure or lmdb_error(path, error)) from error


def _create(path: Path, *, map_size: int, max_readers: int) -> None:
    """Build a new environment beside `path` and rename it into place once complete."""

    def build(staging: Path) -> None:
        env = _open(staging, map_size=map_size, max_readers=max_readers, sync=True)
        try:
            env.open_db(DATA_DB)
            offsets = env.open_db(OFFSETS_DB)
            with env.begin(write=True) as txn:
                txn.put(STATUS_KEY, seal(STATUS_KEY, CLOSED), db=offsets)
                txn.put(FORMAT_KEY, FORMAT, db=offsets)
        finally:
            env.close()

    create_directory_whole(path, build)
