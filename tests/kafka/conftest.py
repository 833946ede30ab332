"""Fixtures for the Kafka plugin's tests: a `KafkaCluster` on the session's broker, a fresh
application with its changelog topics, a reader."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from changelog_support import Changelogs
from iqstate_kafka import ChangelogConsumer, KafkaCluster, LocalBroker, ensure_changelog_topics


@pytest.fixture
def cluster(kafka_broker: LocalBroker) -> KafkaCluster:
    return KafkaCluster(kafka_broker.bootstrap_servers, timeout=10.0)


@pytest.fixture
def changelogs(cluster: KafkaCluster, unique_name: Callable[[str], str]) -> Changelogs:
    """Application `app-…` with a key-value store `counts` (3 partitions), a window store
    `windows` (2)."""
    application_id = unique_name("app")
    stores = {"counts": 3, "windows": 2}
    topics = ensure_changelog_topics(cluster, application_id, stores)
    return Changelogs(application_id, stores, topics)


@pytest.fixture
def reader(cluster: KafkaCluster) -> Iterator[ChangelogConsumer]:
    with ChangelogConsumer(cluster) as reader:
        yield reader
