"""The changelog interface: where the change-logging layer sends every write.

A changelog is a log of `(key, value, position)` records per store partition, from
which a replica can be rebuilt. The Kafka plugin writes it to a topic; the
`InMemoryChangelog` here keeps it in a list, for tests and for single-process use.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from iqstate.position import Position, TopicPartition


def changelog_topic(application_id: str, store_name: str) -> str:
    """The changelog topic of a store, named as Kafka Streams names it."""
    return f"{application_id}-{store_name}-changelog"


@dataclass(frozen=True, slots=True)
class ChangelogRecord:
    """One change of one store partition: `value` is `None` for a delete."""

    partition: TopicPartition
    key: bytes
    value: bytes | None
    position: Position


class ChangelogWriter(Protocol):
    """Receives every change of the stores it is given to, in write order."""

    def send(self, record: ChangelogRecord) -> None:
        """Append a record (it may be buffered until `flush`)."""

    def flush(self) -> Mapping[TopicPartition, int]:
        """Make sent records durable; the end offset (the next record's offset) per partition."""


def outlives_the_process(changelog: object) -> bool:
    """Whether `changelog` keeps its records after the process ends: its `durable`
    attribute, True when it has none (a Kafka topic). Stores whose changelog is durable
    commit without fsync (a crash is repaired from the changelog); the others sync."""
    return bool(getattr(changelog, "durable", True))


@runtime_checkable
class ChangelogReader(Protocol):
    """A changelog that can be read back: what lets the runtime rebuild a store partition."""

    def read(self, partition: TopicPartition, start: int) -> list[ChangelogRecord]:
        """The records of `partition` from offset `start` to its end, in offset order."""
        ...


class InMemoryChangelog:
    """A changelog held in memory: records get consecutive offsets per partition from 0.

    It grows without bound; use it for tests and short-lived single-process applications.
    It is not `durable`: a new process finds it empty, so stores logging to it sync their
    commits, and a partition it cannot rebuild is refused, never started empty.
    """

    durable = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[TopicPartition, list[ChangelogRecord]] = {}

    def send(self, record: ChangelogRecord) -> None:
        with self._lock:
            self._records.setdefault(record.partition, []).append(record)

    def flush(self) -> Mapping[TopicPartition, int]:
        with self._lock:
            return {tp: len(records) for tp, records in self._records.items()}

    def records(self, partition: TopicPartition) -> list[ChangelogRecord]:
        """The records of one changelog partition, offset `i` at index `i`."""
        return self.read(partition, 0)

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return sorted(self._records)

    def read(self, partition: TopicPartition, start: int) -> list[ChangelogRecord]:
        """The records of one changelog partition from offset `start` on."""
        with self._lock:
            return list(self._records.get(partition, ())[start:])
