"""The topics iqstate keeps in Kafka, created when missing and checked when present (SPEC 9).

**Changelogs**: `<application_id>-<store>-changelog`, compacted, one partition per store
partition. A changelog is never re-partitioned or re-configured silently: a topic with
another partition count or another cleanup policy than the store needs is an error naming
the topic, what was found and what was expected.

**The members topic**: `<application_id>-members`, one partition, compacted, stamped with the
broker's clock (`iqstate_kafka.membership` says why), with `segment.ms` of ten minutes so
that old heartbeats are compacted away and joining reads little.

Both kinds are created and checked by the same two admin steps; `EndOffsets` asks for the
end offsets of their partitions.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from iqstate.changelog import changelog_topic
from iqstate_kafka.errors import (
    BrokerUnavailableError,
    ChangelogTopicError,
    ClusterError,
    MembersTopicError,
)
from iqstate_kafka.settings import ClusterSettings

EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
"""The offset specs of `list_offsets` (confluent-kafka leaves them untyped)."""

__all__ = [
    "EndOffsets",
    "changelog_topic",
    "changelog_topics",
    "ensure_changelog_topics",
    "ensure_members_topic",
    "members_topic",
]

CLEANUP_POLICY = "compact"
MEMBERS_TOPIC_SETTINGS: Mapping[str, str] = {"segment.ms": "600000"}
"""Settings of a created members topic that `KafkaCluster.topic_config` may override."""
MEMBERS_OWNED_TOPIC_SETTINGS: Mapping[str, str] = {
    "cleanup.policy": "compact",
    "message.timestamp.type": "LogAppendTime",
}
"""Settings of the members topic that membership depends on: created so, checked at start."""
MEMBERS_CLIENT_DEFAULTS: Mapping[str, Any] = {"reconnect.backoff.max.ms": 1000}
"""Settings of the members topic's clients that `client_config` may override: reconnect to
a restarted broker quickly."""
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class _Kind(NamedTuple):
    """How the admin steps name one kind of topic, and the error they raise for it."""

    name: str
    """One topic of the kind, in messages."""
    several: str
    """The topics of one request, in timeout messages."""
    error: type[ClusterError]


_CHANGELOGS = _Kind("changelog topic", "topics", ChangelogTopicError)
_MEMBERS = _Kind("members topic", "the members topic", MembersTopicError)


def changelog_topics(application_id: str, stores: Mapping[str, int]) -> dict[str, str]:
    """Each store's changelog topic (`stores`: name -> partitions).

    `ValueError` for a partition count that is not an int >= 1, or a topic name Kafka refuses.
    """
    topics = {}
    for store, partitions in stores.items():
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"store {store!r}: partitions must be an int >= 1, got {partitions!r}")
        topic = changelog_topic(application_id, store)
        if not _TOPIC_NAME.fullmatch(topic):
            raise ValueError(
                f"changelog topic {topic!r} (application id {application_id!r}, store "
                f"{store!r}) is not a valid Kafka topic name: at most 249 of [A-Za-z0-9._-]"
            )
        topics[store] = topic
    return topics


def ensure_changelog_topics(
    cluster: ClusterSettings, application_id: str, stores: Mapping[str, int]
) -> dict[str, str]:
    """Create the missing changelog topics of `stores` (name -> partitions), check the others.

    Returns each store's topic. Raises `BrokerUnavailableError` if the cluster does not answer
    within `cluster.timeout`, `ChangelogTopicError` naming every topic that cannot be created
    or has the wrong partition count or cleanup policy.
    """
    topics = changelog_topics(application_id, stores)
    admin = AdminClient(cluster.client_settings())
    existing = cluster_metadata(admin, cluster).topics
    missing = {topic: stores[store] for store, topic in topics.items() if topic not in existing}
    if missing:
        # A batch acknowledged (acks=all) by the leader alone would be lost with it: with
        # three replicas, two must hold it (Kafka's advice: with two, one broker away
        # would stop every write), unless topic_config says otherwise.
        in_sync = {"min.insync.replicas": "2" if cluster.replication_factor >= 3 else "1"}
        config = {**in_sync, **cluster.topic_config, "cleanup.policy": CLEANUP_POLICY}
        refused = _create(admin, cluster, missing, config, _CHANGELOGS)
        if refused:
            raise ChangelogTopicError(
                "; ".join(
                    f"could not create changelog topic {topic!r} ({missing[topic]} partitions, "
                    f"replication factor {cluster.replication_factor}): {reason}"
                    for topic, reason in refused.items()
                )
            )
        existing = await_topics(admin, cluster, list(missing)).topics
    problems = []
    for store, topic in topics.items():
        found = existing[topic]
        if len(found.partitions) != stores[store]:
            problems.append(
                f"changelog topic {topic!r} has {len(found.partitions)} partitions, expected "
                f"{stores[store]} (store {store!r} has {stores[store]}); iqstate never "
                f"re-partitions a changelog: declare the store with {len(found.partitions)} "
                "partitions, or use another application id"
            )
    configs = _configs(admin, cluster, list(topics.values()), ["cleanup.policy"], _CHANGELOGS)
    for topic, settings in configs.items():
        policy = settings["cleanup.policy"]
        if policy != CLEANUP_POLICY:
            problems.append(
                f"changelog topic {topic!r} has cleanup.policy={policy!r}, expected "
                f"{CLEANUP_POLICY!r} (deleting old segments would lose state): set it with "
                f"kafka-configs.sh --alter --entity-type topics --entity-name {topic} "
                f"--add-config cleanup.policy={CLEANUP_POLICY}"
            )
    if problems:
        raise ChangelogTopicError("; ".join(problems))
    return topics


def members_topic(application_id: str) -> str:
    """The members topic of `application_id`; `ValueError` for a name Kafka refuses."""
    topic = f"{application_id}-members"
    if not _TOPIC_NAME.fullmatch(topic):
        raise ValueError(
            f"members topic {topic!r} (application id {application_id!r}) is not a valid Kafka "
            "topic name: at most 249 of [A-Za-z0-9._-]"
        )
    return topic


def ensure_members_topic(cluster: ClusterSettings, application_id: str) -> str:
    """Create the members topic when missing, check it when present; return its name.

    `BrokerUnavailableError` if the cluster does not answer within `cluster.timeout`,
    `MembersTopicError` naming what is wrong with the topic.
    """
    topic = members_topic(application_id)
    admin = AdminClient(cluster.client_settings(MEMBERS_CLIENT_DEFAULTS))
    metadata = cluster_metadata(admin, cluster)
    if topic not in metadata.topics:
        config = {**MEMBERS_TOPIC_SETTINGS, **cluster.topic_config, **MEMBERS_OWNED_TOPIC_SETTINGS}
        refused = _create(admin, cluster, {topic: 1}, config, _MEMBERS)
        if refused:
            raise MembersTopicError(
                f"could not create members topic {topic!r} (1 partition, replication factor "
                f"{cluster.replication_factor}): {refused[topic]}"
            )
        metadata = await_topics(admin, cluster, [topic])
    problems = []
    partitions = len(metadata.topics[topic].partitions)
    if partitions != 1:
        problems.append(f"has {partitions} partitions, expected 1")
    found = _configs(admin, cluster, [topic], MEMBERS_OWNED_TOPIC_SETTINGS, _MEMBERS)[topic]
    for name, value in found.items():
        if value != MEMBERS_OWNED_TOPIC_SETTINGS[name]:
            problems.append(
                f"has {name}={value!r}, expected {MEMBERS_OWNED_TOPIC_SETTINGS[name]!r}"
            )
    if problems:
        raise MembersTopicError(
            f"members topic {topic!r} {' and '.join(problems)}: membership needs one ordered, "
            "compacted log stamped with the broker's clock; delete the topic (iqstate creates "
            "it again) or fix its settings"
        )
    return topic


def cluster_metadata(admin: AdminClient, cluster: ClusterSettings) -> ClusterMetadata:
    """The cluster's topic metadata; `BrokerUnavailableError` when it does not answer."""
    try:
        return admin.list_topics(timeout=cluster.timeout)
    except KafkaException as exc:
        raise unavailable(cluster, exc) from exc


def await_topics(
    admin: AdminClient, cluster: ClusterSettings, topics: list[str]
) -> ClusterMetadata:
    """Metadata once it shows every created topic: a broker learns of them a moment later."""
    deadline = time.monotonic() + cluster.timeout
    while True:
        metadata = cluster_metadata(admin, cluster)
        if all(
            topic in metadata.topics and metadata.topics[topic].error is None for topic in topics
        ):
            return metadata
        if time.monotonic() >= deadline:
            raise unavailable(cluster, f"created topics did not appear: {', '.join(topics)}")
        time.sleep(0.05)


STALE_METADATA = frozenset(
    {
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)
"""Errors that say an admin client's metadata is out of date. librdkafka's admin client does
not refresh its leader epochs on them (measured: after a broker restart every ListOffsets
fails with "Leader epoch is older than broker epoch" for as long as the client lives), so
the client is replaced by a new one, which asks for new metadata."""


class EndOffsets:
    """End offsets of topic partitions, through an admin client of its own that is replaced
    when the broker says its metadata is out of date (a broker restarted, a leader moved)."""

    def __init__(self, cluster: ClusterSettings) -> None:
        self._cluster = cluster
        self._admin = AdminClient(cluster.client_settings())

    def of(self, topic: str, partitions: int, patience: float | None = None) -> list[int]:
        """The end offset of each of `topic`'s `partitions`, in one request to the brokers.

        Errors and requests that time out are retried for `patience` seconds (default
        `cluster.timeout`): a topic created a moment ago, or a broker that just restarted,
        answers with leadership errors until its leaders settle. Then the last one is
        raised as `BrokerUnavailableError`."""
        cluster = self._cluster
        waited = cluster.timeout if patience is None else patience
        deadline = time.monotonic() + waited
        found: dict[int, int] = {}
        while True:
            wanted = {TopicPartition(topic, p): LATEST for p in range(partitions) if p not in found}
            futures = self._admin.list_offsets(wanted, request_timeout=cluster.timeout)
            settled, stale = True, False
            for partition, future in futures.items():
                try:
                    found[partition.partition] = future.result(timeout=cluster.timeout).offset
                except (concurrent.futures.TimeoutError, KafkaException) as exc:
                    timed_out = isinstance(exc, concurrent.futures.TimeoutError)
                    if time.monotonic() >= deadline:
                        why = "timed out" if timed_out else exc.args[0].str()
                        raise unavailable(
                            cluster, f"listing the end offsets of {topic!r}: {why}", waited
                        ) from exc
                    settled = False
                    stale |= not timed_out and exc.args[0].code() in STALE_METADATA
            self._admin.poll(0)  # hands librdkafka's queued log lines to the client logger
            if settled:
                return [found[p] for p in range(partitions)]
            if stale:
                self._admin = AdminClient(cluster.client_settings())
            time.sleep(0.05)


def unavailable(
    cluster: ClusterSettings, cause: object, waited: float | None = None
) -> BrokerUnavailableError:
    """The error for a cluster that did not answer (within `waited` seconds, by default its
    `timeout`), with what to check."""
    within = cluster.timeout if waited is None else waited
    return BrokerUnavailableError(
        f"Kafka at {cluster.bootstrap_servers} did not answer within {within:g} s "
        f"({cause}); check bootstrap_servers, that the brokers run, and the security settings "
        "in client_config (iqstate serve: --cluster, --kafka-config and -X)"
    )


def _create(
    admin: AdminClient,
    cluster: ClusterSettings,
    topics: Mapping[str, int],
    config: dict[str, str],
    kind: _Kind,
) -> dict[str, str]:
    """Create `topics` (name -> partitions) with `config`; return why the cluster refused
    each one it did not create. A topic that exists already is not refused: another
    instance created it meanwhile, and it is checked like any other."""
    new = [
        NewTopic(topic, partitions, cluster.replication_factor, config=config)
        for topic, partitions in topics.items()
    ]
    futures = admin.create_topics(
        new, operation_timeout=cluster.timeout, request_timeout=cluster.timeout
    )
    refused = {}
    for topic, future in futures.items():
        try:
            future.result(timeout=cluster.timeout)
        except concurrent.futures.TimeoutError as exc:
            raise unavailable(cluster, f"creating {kind.several} timed out") from exc
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if error.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                raise unavailable(cluster, error.str()) from exc
            refused[topic] = error.str()
    return refused


def _configs(
    admin: AdminClient,
    cluster: ClusterSettings,
    topics: list[str],
    names: Iterable[str],
    kind: _Kind,
) -> dict[str, dict[str, str]]:
    """The values of the settings `names` of each of `topics`."""
    if not topics:  # the client refuses to describe nothing
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, topic) for topic in topics]
    futures = admin.describe_configs(resources, request_timeout=cluster.timeout)
    configs = {}
    for resource, future in futures.items():
        try:
            entries = future.result(timeout=cluster.timeout)
        except concurrent.futures.TimeoutError as exc:
            raise unavailable(cluster, f"describing {kind.several} timed out") from exc
        except KafkaException as exc:
            raise kind.error(
                f"could not read the configuration of {kind.name} {resource.name!r}: "
                f"{exc.args[0].str()}"
            ) from exc
        configs[resource.name] = {name: entries[name].value for name in names}
    return configs
