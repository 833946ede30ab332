"""Files and directories that a crash or power loss leaves whole: the old or the new
content of a small file, and a store's directory that exists only once complete."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

STAGING_SUFFIX = ".new-"


def replace_atomically(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, rename it over `path`,
    and fsync the directory so the rename itself survives power loss."""
    fd, temporary = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def create_directory_whole(path: Path, build: Callable[[Path], None]) -> None:
    """Create the directory `path` with `build(staging)` in a staging directory beside it,
    then rename it into place and fsync the parent: an existing `path` is always complete,
    so an engine can open it without the right to create a new, empty store.

    Staging directories left by a creation a crash interrupted are removed first: they
    were never renamed into place, so they never held committed data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for leftover in path.parent.glob(path.name + STAGING_SUFFIX + "*"):
        shutil.rmtree(leftover)
    staging = Path(tempfile.mkdtemp(prefix=path.name + STAGING_SUFFIX, dir=path.parent))
    build(staging)
    staging.rename(path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make the entries of `directory` (a rename into it) survive power loss."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


PROBE_BYTES = 1 << 20
"""What `takes_writes` writes: more than an engine writes to open a store (RocksDB's
manifest, options and log files; LMDB's lock file)."""


def takes_writes(directory: Path) -> None:
    """Raise `OSError` unless `directory` takes `PROBE_BYTES` written and fsynced now (a
    full disk, a file size limit, lost permissions): a probe file, removed at once."""
    fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(bytes(PROBE_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
    finally:
        Path(probe).unlink(missing_ok=True)
