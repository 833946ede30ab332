"""RocksDB's errors as iqstate's: a lock held elsewhere, a machine's failure (a full disk),
or a database that cannot be read.

rocksdict raises a bare `Exception` carrying RocksDB's status message ("IO error: ...",
"Corruption: block checksum mismatch ... in /path/000010.sst ..."); the message names the
damaged file, and the error raised here adds the database and what to do.
"""

from __future__ import annotations

from pathlib import Path

from iqstate.errors import CorruptStateError, IqstateError, StateDirectoryLockedError
from iqstate.persistent import UNTRUSTED_REMEDY
from iqstate.storage_failures import storage_failure


def database_error(path: Path, error: Exception) -> IqstateError:
    """The iqstate error for `error`, raised by RocksDB while using the database at `path`."""
    message = str(error)
    if "/LOCK:" in message:  # "IO error: While lock file: <path>/LOCK: ..." and the like
        return StateDirectoryLockedError(
            f"RocksDB database {path} is locked by another process or open handle: {message}"
        )
    failure = storage_failure(f"RocksDB database {path} failed", message)
    if failure is not None:  # a full disk and the like: the files are fine
        return failure
    detail = " ".join(message.split()).rstrip(".")
    return CorruptStateError(
        f"RocksDB database {path} cannot be read: {detail}. {UNTRUSTED_REMEDY}"
    )


def damaged(path: Path, what: str) -> CorruptStateError:
    """A database RocksDB opens but iqstate must not trust: `what` says why."""
    return CorruptStateError(f"RocksDB database {path} {what}. {UNTRUSTED_REMEDY}")
