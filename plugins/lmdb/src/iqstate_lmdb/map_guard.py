"""Map growth and this process's read transactions, taking turns.

LMDB's map may be resized only while no transaction of the process is open: py-lmdb then
invalidates the open ones (a read on one fails, which would look like damage) and
unmaps the old map, where a read in place (`LMDBKeyValueStore.read_stored`) still points.
So a store's short read transactions are counted here, and growing the map waits until
none is open, while new ones wait for it to finish. Closing the environment waits the same
way, and reads begun after it fail as reads of a closed store, not as damage.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType


class MapGuard:
    """Reads and map growth of one LMDB environment, never at the same time.

    `with guard:` around a read transaction: begun once the map is not growing, counted
    until it ends (the guard itself is the context manager, no object made per read: it is
    on every scan's path)."""

    def __init__(self, closed_error: Callable[[], Exception], *, closed: bool = False) -> None:
        self._lock = threading.Lock()
        self._turns = threading.Condition(self._lock)
        """Waits on `_lock`: for the growth (or close) to end, or for the readers to."""
        self._readers = 0
        self._growing = False
        self._closed = closed
        self._closed_error = closed_error
        """The error a read begun after `closing` raises."""

    def __enter__(self) -> None:
        # The lock's own calls, not the condition's (Python-level) context manager: this
        # is a scan's cost (about 1 us of a 25 us LMDB range through the condition).
        self._lock.acquire()
        try:
            while self._growing:
                self._turns.wait()
            if self._closed:
                raise self._closed_error()
            self._readers += 1
        finally:
            self._lock.release()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.acquire()
        try:
            self._readers -= 1
            if self._growing and not self._readers:
                self._turns.notify_all()
        finally:
            self._lock.release()

    @property
    def closed(self) -> bool:
        """Whether reads are refused (`closing` ended)."""
        return self._closed

    @contextmanager
    def growth(self) -> Iterator[None]:
        """Around a resize: new reads wait from now on, the open ones end first."""
        with self._alone():
            yield

    @contextmanager
    def closing(self) -> Iterator[None]:
        """Around closing the environment: as `growth`, and the reads waiting for it, or
        begun after it, raise the closed error."""
        with self._alone():
            yield
            self._closed = True

    @contextmanager
    def _alone(self) -> Iterator[None]:
        """No read of this process in progress or beginning until the block ends."""
        with self._turns:
            while self._growing:  # another thread's growth or close: one at a time
                self._turns.wait()
            self._growing = True
            while self._readers:
                self._turns.wait()
        try:
            yield
        finally:
            with self._turns:
                self._growing = False
                self._turns.notify_all()
