"""Telling a machine's failure from damage in an engine's error: a full disk is not a
corrupt store.

Engines report both through one exception type with a message (RocksDB: "IO error: While
appending to file: .../000012.log: No space left on device"; SQLite: "database or disk is
full"). Calling a full disk damage would tell the operator to restore or move away a store
whose last commit is intact, and make a store with a changelog set its files aside and
rebuild onto the same full disk. `storage_failure` recognises the operating system's
causes in the message and gives `StateStorageError` instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from iqstate.errors import CorruptStateError, IqstateError, StateStorageError

CAUSES = {
    "No space left on device": "the disk is full",
    "database or disk is full": "the disk is full",
    "Disk quota exceeded": "the disk quota is used up",
    "Read-only file system": "the file system is read-only",
    "Permission denied": "this process may not use these files",
    "Too many open files": "the process has no file descriptors left",
    "File too large": "a file reached the size limit set for the process (ulimit -f)",
}
"""The operating system's messages (`strerror`, and SQLite's `SQLITE_FULL`), and what each
means for the operator."""

_WRITE_REFUSED = (
    "the disk did not take the write (a full disk on some file systems, a file size limit, "
    "or a failing device)"
)
WRITE_CAUSES = {
    **CAUSES,
    "Input/output error": _WRITE_REFUSED,  # LMDB's commit (EIO)
    "disk I/O error": _WRITE_REFUSED,  # SQLite's SQLITE_IOERR
}
"""The causes of a failed write transaction: an I/O error counts too, where the engine's
commit is atomic (LMDB writes its meta page last, SQLite keeps a journal), so a failed one
leaves the store at its last commit; on a read it can mean damage."""

REMEDY = (
    "The store keeps its last commit: nothing committed is lost. Fix the cause (an "
    "embedded application stops: start it again; a serving instance retries by itself); "
    "do not move the directory away or delete it"
)


def storage_failure(
    what: str, text: str, causes: Mapping[str, str] = CAUSES
) -> StateStorageError | None:
    """`StateStorageError` for an engine's error `text` when the machine caused it, else
    None. `what` names the store and what failed, e.g. "RocksDB database /s/0 could not
    be written"; `causes` maps markers in `text` to their meaning."""
    for marker, cause in causes.items():
        if marker in text:
            detail = " ".join(text.split()).rstrip(".")
            return StateStorageError(f"{what}: {cause} ({detail}). {REMEDY}")
    return None


@contextmanager
def machine_failures(what: str) -> Iterator[None]:
    """Raise the operating system's errors inside that the machine causes (permissions, a
    full disk) as `StateStorageError` naming `what`; other errors pass unchanged."""
    try:
        yield
    except OSError as error:
        if isinstance(error, IqstateError):
            raise
        failure = storage_failure(what, str(error))
        if failure is None:
            raise
        raise failure from error


def read_own_json(path: Path, remedy: str) -> Any:
    """The JSON document in a file of iqstate's own (`None` if there is no such file). The
    machine's failure to read it is `unreadable`'s error; a file that is not UTF-8 JSON is
    damage: `CorruptStateError` naming it, then `remedy` (what the operator can do)."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise unreadable(path, exc) from exc
    try:
        return json.loads(text.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError included
        raise CorruptStateError(f"{path} is corrupt ({exc}); {remedy}") from exc


def unreadable(path: Path, error: OSError) -> IqstateError:
    """The error for a file of iqstate's own that reading raised `error` for: the machine's
    (`StateStorageError`: this process may not read it, say), else damage."""
    failure = storage_failure(f"cannot read {path}", str(error))
    return failure or CorruptStateError(f"cannot read {path}: {error}")
