"""`WatermarkAsker`: the follower's end offsets, asked without blocking it. Against the
session's broker it answers every partition asked, in one request; against a cluster that is
not there it answers why, and librdkafka's own lines about it reach the client logger."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from iqstate_kafka import KafkaCluster, LocalBroker
from iqstate_kafka.reader import Watermarks
from iqstate_kafka.watermarks import Answer, WatermarkAsker
from support.network import free_port

from iqstate.position import TopicPartition


def _answers(asker: WatermarkAsker, timeout: float) -> dict[TopicPartition, Answer]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers := asker.answers():
            return answers
        time.sleep(0.05)
    pytest.fail(f"no answers within {timeout} s")


def test_answers_the_offsets_of_every_partition_asked(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str]
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique_name("offsets")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for number in range(5):
        producer.produce(topic, b"v", partition=0 if number < 3 else 1)
    assert producer.flush(30) == 0

    asker = WatermarkAsker(KafkaCluster(bootstrap, timeout=10.0))
    asker.ask([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    assert asker.busy
    asker.ask([TopicPartition(topic, 0)])  # one request in flight: this one is not sent
    answers = _answers(asker, 30)
    assert answers == {
        TopicPartition(topic, 0): Watermarks(0, 3),
        TopicPartition(topic, 1): Watermarks(0, 2),
    }
    assert not asker.busy and asker.answers() == {}, "each answer is handed out once"
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert asker.topic_id(topic) == str(described.topic_id), "the topic's id came along"


def test_a_topic_that_is_not_there_answers_why_and_has_no_id(
    kafka_broker: LocalBroker, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("absent")
    asker = WatermarkAsker(KafkaCluster(kafka_broker.bootstrap_servers, timeout=5.0))
    asker.ask([TopicPartition(topic, 0)])
    (reason,) = _answers(asker, 30).values()
    assert isinstance(reason, str) and reason
    assert asker.topic_id(topic) is None


def test_an_absent_cluster_answers_why_and_its_client_lines_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    with caplog.at_level(logging.ERROR, logger="iqstate_kafka.client"):
        asker = WatermarkAsker(KafkaCluster(nobody, timeout=1.0))
        asker.ask([TopicPartition("changelog", 0)])
        answers = _answers(asker, 30)
    (reason,) = answers.values()
    assert isinstance(reason, str) and reason, answers
    refused = [r for r in caplog.records if r.name == "iqstate_kafka.client"]
    assert any("Connection refused" in r.getMessage() for r in refused), caplog.text
