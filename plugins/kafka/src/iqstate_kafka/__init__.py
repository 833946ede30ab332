"""iqstate's distributed mode on Apache Kafka (SPEC 9).

- `KafkaCluster`: where the cluster is and how to talk to it (`cluster`).
- Changelog topics, created and checked (`topics`); their record format (`format`).
- `BatchWriter` writes a batch and its markers durably (`writer`); `ChangelogReader` hands a
  follower units it can apply atomically (`reader`).
- `Follower` applies the changelogs to the store partitions hosted here (`follower`);
  `KafkaConnection` joins an application to the cluster (`connection`).
- `LocalBroker`: a real Kafka broker on this machine for tests and demos (`local_broker`).

The names are imported when first used (PEP 562), so loading the package's `iqstate` plugin
(`iqstate_kafka.plugin`, the `iqstate broker` command) does not load the Kafka client.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from iqstate_kafka.cluster import KafkaCluster
    from iqstate_kafka.connection import KafkaConnection
    from iqstate_kafka.errors import (
        BrokerUnavailableError,
        ChangelogFormatError,
        ChangelogTopicError,
        ClusterError,
        DeliveryError,
        LocalBrokerError,
    )
    from iqstate_kafka.follower import Follower
    from iqstate_kafka.local_broker import LocalBroker
    from iqstate_kafka.reader import ChangelogReader, ChangelogUnit, OffsetOutOfRange, Watermarks
    from iqstate_kafka.topics import changelog_topic, ensure_changelog_topics
    from iqstate_kafka.writer import BatchWriter

_MODULES = {
    "BatchWriter": "writer",
    "BrokerUnavailableError": "errors",
    "ChangelogFormatError": "errors",
    "ChangelogReader": "reader",
    "ChangelogTopicError": "errors",
    "ChangelogUnit": "reader",
    "ClusterError": "errors",
    "DeliveryError": "errors",
    "Follower": "follower",
    "KafkaCluster": "cluster",
    "KafkaConnection": "connection",
    "LocalBroker": "local_broker",
    "LocalBrokerError": "errors",
    "OffsetOutOfRange": "reader",
    "Watermarks": "reader",
    "changelog_topic": "topics",
    "ensure_changelog_topics": "topics",
}

__all__ = [
    "BatchWriter",
    "BrokerUnavailableError",
    "ChangelogFormatError",
    "ChangelogReader",
    "ChangelogTopicError",
    "ChangelogUnit",
    "ClusterError",
    "DeliveryError",
    "Follower",
    "KafkaCluster",
    "KafkaConnection",
    "LocalBroker",
    "LocalBrokerError",
    "OffsetOutOfRange",
    "Watermarks",
    "changelog_topic",
    "ensure_changelog_topics",
]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'iqstate_kafka' has no attribute {name!r}")
    value = getattr(import_module(f"iqstate_kafka.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})
