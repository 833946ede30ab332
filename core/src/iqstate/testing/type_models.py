"""Plain-Python models of the versioned and session stores' semantics, written from the
rules (SPEC 6.1, Kafka's KIP-889/960/968) and not from the stores' layouts: the state
machines and property tests compare every engine's answers with them."""

from __future__ import annotations

import copy

from iqstate.queries import VersionedRecord, Windowed
from iqstate.times import MAX_MS, MIN_MS


class VersionedModel:
    """Every version of every key: `versions[key][timestamp] = value` (`None`: tombstone)."""

    def __init__(self, history_retention_ms: int) -> None:
        self.retention = history_retention_ms
        self.versions: dict[bytes, dict[int, bytes | None]] = {}
        self.stream_time = MIN_MS

    def copy(self) -> VersionedModel:
        return copy.deepcopy(self)

    def boundary(self) -> int:
        return max(MIN_MS, self.stream_time - self.retention)

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        if timestamp < self.boundary():
            return  # older than the retained history: dropped
        self.stream_time = max(self.stream_time, timestamp)
        self.versions.setdefault(key, {})[timestamp] = value

    def _timeline(self, key: bytes) -> list[tuple[int, bytes | None, int | None]]:
        """`(timestamp, value, valid_to)` of each version of `key`, oldest first."""
        stamps = sorted(self.versions.get(key, {}))
        return [
            (stamp, self.versions[key][stamp], stamps[i + 1] if i + 1 < len(stamps) else None)
            for i, stamp in enumerate(stamps)
        ]

    def get(self, key: bytes, as_of: int | None = None) -> VersionedRecord[bytes] | None:
        at = MAX_MS if as_of is None else as_of
        timeline = self._timeline(key)
        if as_of is not None and as_of < self.boundary():
            # Before the history kept: only the current version, if valid then.
            timeline = [entry for entry in timeline[-1:] if entry[0] <= at]
        for stamp, value, valid_to in timeline:
            if stamp <= at and (valid_to is None or at < valid_to):
                return None if value is None else VersionedRecord(value, stamp, valid_to)
        return None

    def versions_of(
        self, key: bytes, time_from: int | None, time_to: int | None, ascending: bool
    ) -> list[VersionedRecord[bytes]]:
        start = MIN_MS if time_from is None else time_from
        end = MAX_MS if time_to is None else time_to
        if start > end:
            return []
        if end < self.boundary():
            return [
                VersionedRecord(value, stamp, None)
                for stamp, value, _ in self._timeline(key)[-1:]
                if value is not None and stamp <= end
            ]
        found = [
            VersionedRecord(value, stamp, valid_to)
            for stamp, value, valid_to in self._timeline(key)
            if value is not None
            and stamp <= end
            and (valid_to is None or (valid_to > start and valid_to > self.boundary()))
        ]
        return found if ascending else found[::-1]

    def range_as_of(
        self, lower: bytes | None, upper: bytes | None, as_of: int | None
    ) -> list[tuple[bytes, VersionedRecord[bytes]]]:
        found = []
        for key in sorted(self.versions):
            if (lower is None or key >= lower) and (upper is None or key <= upper):
                record = self.get(key, as_of)
                if record is not None:
                    found.append((key, record))
        return found


class SessionModel:
    """Every session: `sessions[(key, start, end)] = value`."""

    def __init__(self, retention_ms: int) -> None:
        self.retention = retention_ms
        self.sessions: dict[tuple[bytes, int, int], bytes] = {}
        self.stream_time = MIN_MS

    def copy(self) -> SessionModel:
        return copy.deepcopy(self)

    def limit(self) -> int:
        return max(MIN_MS, self.stream_time - self.retention)

    def put(self, key: bytes, value: bytes | None, start: int, end: int) -> None:
        if end > self.stream_time:
            self.stream_time = end
            limit = self.limit()
            self.sessions = {s: v for s, v in self.sessions.items() if s[2] > limit}
        if end <= self.limit():
            return
        if value is None:
            self.sessions.pop((key, start, end), None)
        else:
            self.sessions[(key, start, end)] = value

    def fetch(
        self, key: bytes | None, time_from: int, time_to: int
    ) -> list[tuple[Windowed[bytes], bytes]]:
        return [
            (Windowed(k, start, end), value)
            for (k, start, end), value in sorted(self.sessions.items())
            if (key is None or k == key) and time_from <= start <= time_to
        ]
