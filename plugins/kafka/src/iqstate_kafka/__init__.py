"""iqstate's distributed mode on Apache Kafka (SPEC 9).

The modules form layers; each imports only from the layers below it and from modules
listed before it in its own layer:

1. `settings` (`ClusterSettings`: where the cluster is and how to talk to it), `errors`,
   `assignor` (who hosts what, a pure function of the live members) and `progress` (what
   the follower tells the assignment about the replicas hosted here);
2. the records and topics: `format` (the changelog record format), `heartbeats` (the
   members topic's records) and `topics` (both kinds of topic, created and checked);
3. the clients: `reader` (`ChangelogConsumer` hands a follower units it can apply
   atomically), `writer` (`BatchWriter` writes a batch and its markers durably), `applying`,
   `replicas` and `watermarks` (the follower's steps), and `membership` (who is live);
4. `follower` (`Follower` applies the changelogs to the store partitions hosted here),
   `assignment` (the assignment provider) and `connection` (`KafkaConnection` joins an
   application to the cluster);
5. `cluster`: `KafkaCluster`, the settings users give, whose `connect` wires the rest.

Beside them, `maven` (jars fetched from Maven Central once), `testing` (`LocalBroker`: a
real Kafka broker on this machine for tests and demos) and `plugin` (the `iqstate broker`
command).

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
    )
    from iqstate_kafka.follower import Follower
    from iqstate_kafka.reader import ChangelogConsumer, ChangelogUnit, OffsetOutOfRange, Watermarks
    from iqstate_kafka.testing import LocalBroker, LocalBrokerError
    from iqstate_kafka.topics import changelog_topic, ensure_changelog_topics
    from iqstate_kafka.writer import BatchWriter

_MODULES = {
    "BatchWriter": "writer",
    "BrokerUnavailableError": "errors",
    "ChangelogConsumer": "reader",
    "ChangelogFormatError": "errors",
    "ChangelogTopicError": "errors",
    "ChangelogUnit": "reader",
    "ClusterError": "errors",
    "DeliveryError": "errors",
    "Follower": "follower",
    "KafkaCluster": "cluster",
    "KafkaConnection": "connection",
    "LocalBroker": "testing",
    "LocalBrokerError": "testing",
    "OffsetOutOfRange": "reader",
    "Watermarks": "reader",
    "changelog_topic": "topics",
    "ensure_changelog_topics": "topics",
}

__all__ = [
    "BatchWriter",
    "BrokerUnavailableError",
    "ChangelogConsumer",
    "ChangelogFormatError",
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
