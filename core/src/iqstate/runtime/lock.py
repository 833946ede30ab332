"""An exclusive lock on an application's state directory, naming its holder when taken."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from iqstate.errors import StateDirectoryLockedError, StateStorageError


class DirectoryLock:
    """`flock` on `<directory>/.lock`, with the holder's PID written inside.

    The operating system releases the lock when the holder exits, however it exits, so a
    crashed process never leaves a stale lock behind.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / ".lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # a file in the way, no permission, a read-only disk
            raise self._unusable(exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            who = (
                "another Application in this process with the same application_id and "
                "state_dir is running: close it first"
                if holder == str(os.getpid())
                else "another Application with the same application_id and state_dir is running"
            )
            raise StateDirectoryLockedError(
                f"state directory {self.path.parent} is locked by process {holder}; {who}"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise self._unusable(exc) from exc
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        except OSError as exc:  # a full disk: give the lock back, or it stays held
            os.close(fd)
            raise self._unusable(exc) from exc
        self._fd = fd

    def _unusable(self, exc: OSError) -> StateStorageError:
        return StateStorageError(
            f"state directory {self.path.parent} cannot be created or locked: "
            f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}"
        )

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None
