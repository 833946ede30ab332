"""How long store commits take, per store, as a histogram (KIP-1035's commit metrics).

Bounded buckets and a sum, under a lock: a commit happens once per batch per partition, so
recording is cheap next to it. `Application.commit_durations()` hands out snapshots, which
exporters (the HTTP service's `/metrics`) turn into their own format.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass

COMMIT_BUCKETS = (
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""Upper bounds in seconds: a memory store commits in microseconds, an fsync'd one in
milliseconds, a slow disk in seconds."""


@dataclass(frozen=True)
class DurationsSnapshot:
    """`counts[i]`: durations at most `bounds[i]` and above the bound before (the last: above
    every bound); `total`: their sum in seconds."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)


class Durations:
    """A histogram of durations, recorded from any thread."""

    def __init__(self, bounds: tuple[float, ...] = COMMIT_BUCKETS) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._total = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        index = bisect_left(self._bounds, seconds)
        with self._lock:
            self._counts[index] += 1
            self._total += seconds

    def snapshot(self) -> DurationsSnapshot:
        with self._lock:
            return DurationsSnapshot(self._bounds, tuple(self._counts), self._total)
