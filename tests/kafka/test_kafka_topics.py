"""Changelog topics on a real broker: created compacted with the store's partitions, checked
when present, and a clear error (never a hang) when the broker does not answer."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from iqstate_kafka import (
    BrokerUnavailableError,
    ChangelogTopicError,
    KafkaCluster,
    ensure_changelog_topics,
)


def describe(cluster: KafkaCluster, topic: str) -> tuple[int, dict[str, str]]:
    """Partition count and settings of `topic`, as the broker reports them."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    return partitions, {name: entry.value for name, entry in entries.items()}


def create(cluster: KafkaCluster, topic: str, partitions: int, policy: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    new = NewTopic(topic, partitions, 1, config={"cleanup.policy": policy})
    admin.create_topics([new])[topic].result(timeout=10)


def test_missing_topics_are_created_compacted_with_the_stores_partitions(
    cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("app")
    tuned = KafkaCluster(cluster.bootstrap_servers, topic_config={"segment.ms": "600000"})
    topics = ensure_changelog_topics(tuned, app, {"counts": 4, "totals": 1})
    assert topics == {"counts": f"{app}-counts-changelog", "totals": f"{app}-totals-changelog"}
    partitions, config = describe(cluster, topics["counts"])
    assert partitions == 4
    assert config["cleanup.policy"] == "compact"
    assert config["segment.ms"] == "600000"
    assert config["min.insync.replicas"] == "1", "the replication factor, up to 2"
    assert describe(cluster, topics["totals"])[0] == 1


def test_existing_topics_that_fit_are_accepted(
    cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("app")
    create(cluster, f"{app}-counts-changelog", 2, "compact")
    assert ensure_changelog_topics(cluster, app, {"counts": 2}) == {
        "counts": f"{app}-counts-changelog"
    }
    assert ensure_changelog_topics(cluster, app, {"counts": 2}) == {
        "counts": f"{app}-counts-changelog"
    }


def test_a_topic_with_other_partitions_is_refused(
    cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("app")
    create(cluster, f"{app}-counts-changelog", 3, "compact")
    with pytest.raises(ChangelogTopicError) as caught:
        ensure_changelog_topics(cluster, app, {"counts": 4})
    assert (
        f"changelog topic '{app}-counts-changelog' has 3 partitions, expected 4 "
        "(store 'counts' has 4)" in str(caught.value)
    )
    assert describe(cluster, f"{app}-counts-changelog")[0] == 3


def test_a_topic_that_is_not_compacted_is_refused(
    cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("app")
    create(cluster, f"{app}-counts-changelog", 2, "delete")
    create(cluster, f"{app}-totals-changelog", 2, "compact,delete")
    with pytest.raises(ChangelogTopicError) as caught:
        ensure_changelog_topics(cluster, app, {"counts": 2, "totals": 2, "fresh": 1})
    message = str(caught.value)
    assert (
        f"changelog topic '{app}-counts-changelog' has cleanup.policy='delete', expected "
        "'compact'" in message
    )
    assert (
        f"changelog topic '{app}-totals-changelog' has cleanup.policy='compact,delete', "
        "expected 'compact'" in message
    )
    assert describe(cluster, f"{app}-counts-changelog")[1]["cleanup.policy"] == "delete"


def test_a_replication_factor_the_cluster_cannot_give_is_a_clear_error(
    cluster: KafkaCluster, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("app")
    three = KafkaCluster(cluster.bootstrap_servers, replication_factor=3)
    with pytest.raises(ChangelogTopicError) as caught:
        ensure_changelog_topics(three, app, {"counts": 2})
    assert (
        f"could not create changelog topic '{app}-counts-changelog' (2 partitions, "
        "replication factor 3)" in str(caught.value)
    )


def test_an_unreachable_broker_is_a_clear_error() -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    nobody = KafkaCluster(f"127.0.0.1:{port}", timeout=1.0)
    with pytest.raises(BrokerUnavailableError) as caught:
        ensure_changelog_topics(nobody, "app", {"counts": 2})
    assert str(caught.value).startswith(f"Kafka at 127.0.0.1:{port} did not answer within 1 s")


@pytest.mark.parametrize(
    ("application_id", "stores", "message"),
    [
        ("app", {"counts": 0}, "store 'counts': partitions must be an int >= 1, got 0"),
        ("my app", {"counts": 1}, "'my app-counts-changelog' .* is not a valid Kafka topic"),
        ("a" * 240, {"counts": 1}, "is not a valid Kafka topic name: at most 249"),
    ],
)
def test_bad_stores_are_refused_before_asking_the_broker(
    application_id: str, stores: dict[str, int], message: str
) -> None:
    nowhere = KafkaCluster("127.0.0.1:9", timeout=0.1)
    with pytest.raises(ValueError, match=message):
        ensure_changelog_topics(nowhere, application_id, stores)
