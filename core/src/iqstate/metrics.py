"""Store metrics: per-operation latency (avg, max) and rate, as Kafka Streams reports them.

Recording is on the hot path, so a sensor is a handful of integer updates; rates are
computed only when read, over a window of two rolling samples (Kafka's `Rate`).
"""

from __future__ import annotations

import time

_DEFAULT_SAMPLE_NS = 30 * 1_000_000_000


class Sensor:
    """Counts events and their latencies; reports `-rate`, `-latency-avg`, `-latency-max`."""

    __slots__ = (
        "_current_count",
        "_current_start",
        "_previous_count",
        "_previous_start",
        "_sample_ns",
        "count",
        "max_ns",
        "name",
        "total_ns",
    )

    def __init__(self, name: str, sample_ns: int = _DEFAULT_SAMPLE_NS) -> None:
        self.name = name
        self.count = 0
        self.total_ns = 0
        self.max_ns = 0
        self._sample_ns = sample_ns
        now = time.monotonic_ns()
        self._previous_start = now
        self._previous_count = 0
        self._current_start = now
        self._current_count = 0

    def record(self, latency_ns: int, now_ns: int) -> None:
        """Record one event that took `latency_ns` and ended at `now_ns` (monotonic)."""
        self.count += 1
        self.total_ns += latency_ns
        if latency_ns > self.max_ns:
            self.max_ns = latency_ns
        if now_ns - self._current_start >= self._sample_ns:
            self._roll(now_ns)
        self._current_count += 1

    def _roll(self, now_ns: int) -> None:
        if now_ns - self._current_start >= 2 * self._sample_ns:
            self._previous_count = 0
            self._previous_start = now_ns - self._sample_ns
        else:
            self._previous_count = self._current_count
            self._previous_start = self._current_start
        self._current_count = 0
        self._current_start = now_ns

    def rate(self, now_ns: int | None = None) -> float:
        """Events per second over the last one to two sample windows."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        if now - self._current_start >= self._sample_ns:
            self._roll(now)
        elapsed = max(now - self._previous_start, self._sample_ns)
        return (self._previous_count + self._current_count) * 1e9 / elapsed

    @property
    def latency_avg_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0

    def snapshot(self) -> dict[str, float]:
        return {
            f"{self.name}-rate": self.rate(),
            f"{self.name}-latency-avg": self.latency_avg_ns,
            f"{self.name}-latency-max": float(self.max_ns),
        }


class StoreMetrics:
    """The sensors of one store partition, created on first use of each operation."""

    __slots__ = ("_sensors", "store_name")

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name
        self._sensors: dict[str, Sensor] = {}

    def sensor(self, operation: str) -> Sensor:
        sensor = self._sensors.get(operation)
        if sensor is None:
            sensor = self._sensors[operation] = Sensor(operation)
        return sensor

    def snapshot(self) -> dict[str, float]:
        """Every metric by name, e.g. `{"put-rate": ..., "commit-latency-max": ...}` (ns)."""
        values: dict[str, float] = {}
        for sensor in self._sensors.values():
            values.update(sensor.snapshot())
        return values
