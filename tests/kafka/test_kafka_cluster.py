"""`KafkaCluster`: a frozen configuration that refuses what it cannot use, with clear errors."""

from __future__ import annotations

import dataclasses
import re

import pytest
from iqstate_kafka import KafkaCluster


def test_servers_are_normalized_and_settings_pass_through() -> None:
    cluster = KafkaCluster(
        [" broker-1:9092", "broker-2:9093"],
        replication_factor=3,
        client_config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "app",
            "sasl.password": "secret",
        },
        topic_config={"min.insync.replicas": "2"},
    )
    assert cluster.bootstrap_servers == "broker-1:9092,broker-2:9093"
    settings = cluster.client_settings({"linger.ms": 5}, acks="all")
    assert settings["bootstrap.servers"] == "broker-1:9092,broker-2:9093"
    assert settings["security.protocol"] == "SASL_SSL"
    assert settings["sasl.mechanism"] == "PLAIN"
    assert settings["linger.ms"] == 5
    assert settings["acks"] == "all"


def test_settings_librdkafka_refuses_are_refused_at_once_by_name() -> None:
    # Not at start(), when the first client is made: an unknown name, a bad value, an
    # incomplete SASL set-up.
    for config, named in (
        ({"no.such.setting": "1"}, 'No such configuration property: "no.such.setting"'),
        ({"linger.ms": "soon"}, "Invalid value"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "sasl.username"),
        ({"fetch.max.bytes": 1000}, "fetch.max.bytes"),  # a consumer's rule
        # the idempotent writer's rules (they were refused at the first batch only)
        ({"max.in.flight.requests.per.connection": 100}, "max.in.flight"),
        ({"retries": 0}, "retries"),
        ({"enable.gapless.guarantee": True}, "enable.gapless.guarantee"),  # a plain producer's
    ):
        with pytest.raises(ValueError, match=f"client_config: .*{re.escape(named)}"):
            KafkaCluster("localhost:9092", client_config=config)


def test_the_check_leaves_the_users_callbacks_alone() -> None:
    fetched: list[object] = []

    def token(config: object) -> tuple[str, float]:  # an identity provider's round trip
        fetched.append(config)
        return "token", 0.0

    KafkaCluster("localhost:9092", client_config={"oauth_cb": token, "linger.ms": 5})
    assert fetched == []


def test_user_settings_override_defaults() -> None:
    cluster = KafkaCluster("localhost:9092", client_config={"linger.ms": 50})
    assert cluster.client_settings({"linger.ms": 5})["linger.ms"] == 50


def test_frozen_and_copied() -> None:
    config = {"client.id": "a"}
    cluster = KafkaCluster("localhost:9092", client_config=config)
    config["client.id"] = "b"
    assert cluster.client_config["client.id"] == "a"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cluster.replication_factor = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        cluster.client_config["client.id"] = "c"  # type: ignore[index]


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ("", "empty"),
        ("localhost", "'localhost' is not 'host:port'"),
        ("localhost:0", "port in 1..65535"),
        ("localhost:99999", "port in 1..65535"),
        (":9092", "not 'host:port'"),
        (9092, "bootstrap_servers must be"),
        # an instance's HTTP address given for the broker's: refused, not waited out
        ("http://127.0.0.1:7071", "names the scheme 'http://': give a Kafka broker's"),
    ],
)
def test_bad_bootstrap_servers(servers: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaCluster(servers)  # type: ignore[arg-type]


def test_a_kafka_listener_scheme_is_taken() -> None:
    assert KafkaCluster("SSL://b-1:9093,sasl_ssl://b-2:9093").bootstrap_servers == (
        "SSL://b-1:9093,sasl_ssl://b-2:9093"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"replication_factor": 0}, "replication_factor must be an int >= 1, got 0"),
        ({"replication_factor": True}, "replication_factor must be an int >= 1"),
        ({"timeout": 0}, "timeout must be a number of seconds > 0"),
        ({"timeout": float("inf")}, "timeout must be a number of seconds > 0"),
        ({"client_config": {"bootstrap.servers": "x:1"}}, "pass it as bootstrap_servers"),
        ({"client_config": {"enable.idempotence": False}}, "sets enable.idempotence: iqstate"),
        ({"client_config": {"auto.offset.reset": "latest"}}, "sets auto.offset.reset"),
        ({"client_config": {1: "x"}}, "keys must be non-empty strings"),
        ({"client_config": [("acks", "1")]}, "client_config must be a mapping"),
        ({"topic_config": {"cleanup.policy": "delete"}}, "sets cleanup.policy"),
        ({"topic_config": {"min.insync.replicas": 2}}, r"topic_config\['min.insync.replicas'\]"),
        ({"reader_processes": -1}, "reader_processes must be an int >= 0, got -1"),
        ({"reader_processes": 1.5}, "reader_processes must be an int >= 0"),
        ({"max_held_records": 0}, "max_held_records must be an int >= 1 records, or None"),
        ({"max_held_records": "1e6"}, "max_held_records must be an int >= 1 records"),
    ],
)
def test_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaCluster("localhost:9092", **options)  # type: ignore[arg-type]
