"""`ClusterSettings`: where distributed mode's Kafka is and how to talk to it.

A frozen value: the bootstrap servers, the replication factor of the topics iqstate creates,
the client settings passed through to every confluent-kafka client (SASL/SSL and anything
else librdkafka accepts), and how long a request may take before the cluster counts as
unreachable. Settings whose values iqstate's guarantees depend on are refused in
`client_config` instead of silently overridden.

The bottom of the package: every client and topic module takes these settings, so they
import nothing of it. Users build them as `KafkaCluster` (`iqstate_kafka.cluster`), which
adds `connect` on top.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from types import MappingProxyType
from typing import Any

from iqstate.repeated_lines import RepeatedLines
from iqstate_kafka.client_logs import shape

CLIENT_LOGGER = logging.getLogger("iqstate_kafka.client")
"""Where librdkafka's own log lines go (instead of stderr) unless `client_config` names one;
a line that repeats is logged once per 30 s (`iqstate_kafka.client_logs`)."""
CLIENT_LOGGER.addFilter(RepeatedLines(shape))

OWNED_SETTINGS = frozenset(
    {
        "bootstrap.servers",
        "enable.idempotence",
        "acks",
        "transactional.id",
        "delivery.report.only.error",
        "message.timeout.ms",
        "delivery.timeout.ms",
        "on_delivery",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "isolation.level",
    }
)
"""librdkafka settings iqstate sets itself, because correctness depends on their values."""

DEFAULT_MAX_HELD_RECORDS = 1_000_000
"""Data records a serving instance holds while their batches' markers have not come: about
0.3 GB with 16-byte keys and 100-byte values (`ClusterSettings.max_held_records`)."""

OWNED_TOPIC_SETTINGS = frozenset({"cleanup.policy"})
"""Topic settings iqstate sets itself: changelogs are compacted, always."""


@dataclass(frozen=True)
class ClusterSettings:
    """The settings of a Kafka cluster (SPEC 9); see `KafkaCluster` for each field."""

    bootstrap_servers: str
    _: KW_ONLY
    replication_factor: int = 1
    client_config: Mapping[str, Any] = field(default_factory=dict, hash=False)
    topic_config: Mapping[str, str] = field(default_factory=dict, hash=False)
    timeout: float = 5.0
    heartbeat_interval: float = 0.5
    liveness_timeout: float = 3.0
    acceptable_recovery_lag: int = 10_000
    reader_processes: int = 0
    max_held_records: int | None = DEFAULT_MAX_HELD_RECORDS

    def __post_init__(self) -> None:
        object.__setattr__(self, "bootstrap_servers", _servers(self.bootstrap_servers))
        rf = self.replication_factor
        if isinstance(rf, bool) or not isinstance(rf, int) or rf < 1:
            raise ValueError(f"replication_factor must be an int >= 1, got {rf!r}")
        for name in ("timeout", "heartbeat_interval", "liveness_timeout"):
            _check_seconds(name, getattr(self, name))
        if self.liveness_timeout < 3 * self.heartbeat_interval:
            raise ValueError(
                f"liveness_timeout ({self.liveness_timeout!r} s) must be at least three "
                f"heartbeat intervals ({self.heartbeat_interval!r} s): one late heartbeat must "
                "not make an instance count as dead"
            )
        lag = self.acceptable_recovery_lag
        if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
            raise ValueError(f"acceptable_recovery_lag must be an int >= 0 offsets, got {lag!r}")
        readers = self.reader_processes
        if isinstance(readers, bool) or not isinstance(readers, int) or readers < 0:
            raise ValueError(f"reader_processes must be an int >= 0, got {readers!r}")
        held = self.max_held_records
        if held is not None and (isinstance(held, bool) or not isinstance(held, int) or held < 1):
            raise ValueError(
                f"max_held_records must be an int >= 1 records, or None for no bound, got {held!r}"
            )
        object.__setattr__(
            self, "client_config", _settings("client_config", self.client_config, OWNED_SETTINGS)
        )
        _check_client_config(self.client_config)
        topic_config = _settings("topic_config", self.topic_config, OWNED_TOPIC_SETTINGS)
        for key, value in topic_config.items():
            if not isinstance(value, str):
                raise ValueError(
                    f"topic_config[{key!r}] must be a string, got {type(value).__name__}"
                )
        object.__setattr__(self, "topic_config", topic_config)

    def client_settings(
        self, defaults: Mapping[str, Any] | None = None, **owned: Any
    ) -> dict[str, Any]:
        """The settings of a new client: `defaults`, then the user's, then iqstate's `owned`."""
        settings: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        settings["logger"] = CLIENT_LOGGER
        settings.update(defaults or {})
        settings.update(self.client_config)
        settings.update(owned)
        return settings


def _check_seconds(name: str, value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")


def _servers(value: object) -> str:
    if isinstance(value, str):
        entries = [entry.strip() for entry in value.split(",")]
    elif isinstance(value, Sequence) and all(isinstance(entry, str) for entry in value):
        entries = [entry.strip() for entry in value]
    else:
        raise ValueError(
            f"bootstrap_servers must be 'host:port[,host:port...]' or a list of 'host:port', "
            f"got {value!r}"
        )
    if not entries or entries == [""]:
        raise ValueError("bootstrap_servers is empty: give at least one 'host:port'")
    for entry in entries:
        host, _, port = entry.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"bootstrap_servers entry {entry!r} is not 'host:port' with a port in 1..65535"
            )
        scheme, separator, _ = host.partition("://")
        if separator and scheme.upper() not in _LISTENER_SCHEMES:
            raise ValueError(
                f"bootstrap_servers entry {entry!r} names the scheme {scheme + '://'!r}: give "
                "a Kafka broker's host:port (an iqstate instance's HTTP address is not one), "
                f"optionally after one of {', '.join(sorted(_LISTENER_SCHEMES))}://"
            )
    return ",".join(entries)


_LISTENER_SCHEMES = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
"""The security protocols librdkafka takes before a bootstrap server's host."""


_SILENT = logging.getLogger("iqstate_kafka.client.config_check")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


def _check_client_config(config: Mapping[str, Any]) -> None:
    """Refuse settings librdkafka refuses (an unknown name, a bad value, a certificate file
    it cannot read) now, naming them, rather than when the first client is made at start.
    librdkafka checks them when a client is created: producers (plain, and idempotent as the
    batch writer's) and a consumer are, without a broker to reach, and dropped (their
    warnings about settings for the other kind of client are not shown)."""
    # The user's callbacks are left out: an `oauth_cb` would fetch a real token.
    checked = {key: value for key, value in config.items() if not callable(value)}
    if not checked:
        return
    from confluent_kafka import Consumer, KafkaException, Producer

    settings = {**checked, "bootstrap.servers": "", "logger": _SILENT}
    try:
        # Plain, as most of iqstate's producers are, and idempotent, as the batch writer's
        # is: each refuses settings the other takes (`enable.gapless.guarantee`; retries=0,
        # more than 5 requests in flight).
        Producer(settings)
        Producer({**settings, "enable.idempotence": True, "acks": "all"})
        Consumer({"group.id": "iqstate-config-check", **settings}).close()
    except KafkaException as exc:
        raise ValueError(f"client_config: {exc.args[0].str()}") from None


def _settings(name: str, value: object, owned: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping, got {type(value).__name__}")
    copy = dict(value)
    for key in copy:
        if not isinstance(key, str) or not key:
            raise ValueError(f"{name} keys must be non-empty strings, got {key!r}")
    if "bootstrap.servers" in copy:
        raise ValueError(f"{name} sets bootstrap.servers: pass it as bootstrap_servers")
    refused = sorted(owned & copy.keys())
    if refused:
        raise ValueError(
            f"{name} sets {', '.join(refused)}: iqstate sets these itself, because its "
            "guarantees depend on their values"
        )
    return MappingProxyType(copy)
