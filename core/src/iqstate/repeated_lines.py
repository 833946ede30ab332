"""A logging filter for lines that repeat: each shape of line once per window, the next one
to pass saying how many were held back. A log flood (a client reconnecting every few
milliseconds, a refusal per batch) then costs a line per window, not millions a day."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

_MOST_SHAPES = 1000
"""Shapes remembered at once; past it they are forgotten (a line then passes again)."""


class RepeatedLines(logging.Filter):
    """Passes each shape of line once per `window` seconds. `shape` maps a line to what its
    repeats share, or to None for a line never held back."""

    def __init__(
        self,
        shape: Callable[[str], str | None],
        window: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self._window, self._clock, self._shape = window, clock, shape
        self._lock = threading.Lock()
        self._shapes: dict[str, list[float | int]] = {}
        """shape -> [when its window began, lines held back since]"""

    def filter(self, record: logging.LogRecord) -> bool:
        line = record.getMessage()
        key = self._shape(line)
        if key is None:
            return True
        now = self._clock()
        with self._lock:
            seen = self._shapes.get(key)
            if seen is not None and now - seen[0] < self._window:
                seen[1] += 1
                return False
            if len(self._shapes) >= _MOST_SHAPES:
                self._shapes.clear()
            self._shapes[key] = [now, 0]
        if seen is not None and seen[1]:
            held, since = int(seen[1]), now - seen[0]
            record.msg = f"{line} ({held} more like it in the {since:.0f} s before)"
            record.args = ()
        return True
