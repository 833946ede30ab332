"""Helpers of the Kafka plugin's tests: an application's changelogs, and reading until a
follower has what it waits for."""

from __future__ import annotations

import time
from dataclasses import dataclass

from iqstate_kafka import ChangelogConsumer, ChangelogUnit, OffsetOutOfRange

from iqstate import TopicPartition


@dataclass(frozen=True)
class Changelogs:
    """An application id and its stores' changelog topics, created on the broker."""

    application_id: str
    stores: dict[str, int]
    topics: dict[str, str]

    def partition(self, store: str, partition: int) -> TopicPartition:
        return TopicPartition(self.topics[store], partition)

    def partitions(self) -> list[TopicPartition]:
        return [
            self.partition(store, number)
            for store, count in self.stores.items()
            for number in range(count)
        ]


Event = ChangelogUnit | OffsetOutOfRange


def read_events(reader: ChangelogConsumer, count: int, within: float = 30.0) -> list[Event]:
    """Read until `count` events arrived (or `within` seconds passed): what a follower gets."""
    events: list[Event] = []
    deadline = time.monotonic() + within
    while len(events) < count and time.monotonic() < deadline:
        events += reader.read(0.5)
    return events


def units_by_partition(events: list[Event]) -> dict[TopicPartition, list[ChangelogUnit]]:
    grouped: dict[TopicPartition, list[ChangelogUnit]] = {}
    for event in events:
        assert isinstance(event, ChangelogUnit), event
        grouped.setdefault(event.partition, []).append(event)
    return grouped
