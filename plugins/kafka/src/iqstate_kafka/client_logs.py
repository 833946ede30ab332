"""Log lines that repeat, each shape once per window: librdkafka's, and a follower's
refusals.

While a broker is down every client reconnects on its own schedule and logs each failed
attempt: measured with one serving instance and its broker stopped, its two changelog and
members consumers logged `Connect to ... failed: Connection refused` every 35-50 ms, 1,300
lines in 30 s (millions a day of an outage, in a log shipper). `RepeatedLines` lets the
first line of each shape through, holds back the same shape for `window` seconds, then lets
the next one through saying how many it held back. A shape is the line without what
changes between repeats: the client's instance name and librdkafka's own
`(after 0ms in state CONNECT, 5 identical error(s) suppressed)`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

_CLIENT = re.compile(r"rdkafka#(\w+)-\d+")
_TIMING = re.compile(r"\s*\(after \d+ms in state \w+(, \d+ identical error\(s\) suppressed)?\)")
_MOST_SHAPES = 1000
"""Shapes remembered at once; past it they are forgotten (a line then passes again)."""


def shape(line: str) -> str:
    """`line` without what changes from one repeat to the next."""
    return _TIMING.sub("", _CLIENT.sub(r"rdkafka#\1", line))


class RepeatedLines(logging.Filter):
    """A logging filter passing each shape of line once per `window` seconds; `shape` maps
    a line to what its repeats share (by default librdkafka's lines, `shape`)."""

    def __init__(
        self,
        window: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        shape: Callable[[str], str] = shape,
    ):
        super().__init__()
        self._window, self._clock, self._shape = window, clock, shape
        self._lock = threading.Lock()
        self._shapes: dict[str, list[float | int]] = {}
        """shape -> [when its window began, lines held back since]"""

    def filter(self, record: logging.LogRecord) -> bool:
        line = record.getMessage()
        key, now = self._shape(line), self._clock()
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
