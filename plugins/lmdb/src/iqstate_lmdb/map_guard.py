"""Map growth and this process's read transactions, taking turns.

LMDB's map may be resized only while no transaction of the process is open: py-lmdb then
invalidates the open ones (a read on one fails, which would look like damage) and
unmaps the old map, where a read in place (`LMDBKeyValueStore.read_stored`) still points.
So a store's short read transactions are counted here, and growing the map waits until
none is open, while new ones wait for it to finish.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class MapGuard:
    """Reads and map growth of one LMDB environment, never at the same time."""

    def __init__(self) -> None:
        self._turns = threading.Condition()
        self._readers = 0
        self._growing = False

    @property
    def growing(self) -> bool:
        """Whether the map is growing (a transaction begun now must wait or be guarded)."""
        return self._growing

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around a read transaction: begun once the map is not growing, counted until it
        ends."""
        with self._turns:
            while self._growing:
                self._turns.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._turns:
                self._readers -= 1
                if not self._readers:
                    self._turns.notify_all()

    @contextmanager
    def growth(self) -> Iterator[None]:
        """Around a resize: new reads wait from now on, the open ones end first."""
        with self._turns:
            while self._growing:  # another thread's growth: one at a time
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
