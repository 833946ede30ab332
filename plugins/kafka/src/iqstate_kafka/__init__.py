"""iqstate's distributed mode on Apache Kafka (SPEC 9).

- `KafkaCluster`: where the cluster is and how to talk to it (`cluster`).
- Changelog topics, created and checked (`topics`); their record format (`format`).
- `BatchWriter` writes a batch and its markers durably (`writer`); `ChangelogReader` hands a
  follower units it can apply atomically (`reader`).
- `Follower` applies the changelogs to the store partitions hosted here (`follower`);
  `KafkaConnection` joins an application to the cluster (`connection`).
- `LocalBroker`: a real Kafka broker on this machine for tests and demos (`local_broker`).
"""

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
