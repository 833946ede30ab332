"""Exceptions of iqstate's Kafka plugin; each message names what was wrong and where."""

from __future__ import annotations

from iqstate.errors import IqstateError


class ClusterError(IqstateError):
    """Base class of the errors of distributed mode."""


class BrokerUnavailableError(ClusterError):
    """The Kafka cluster did not answer within the configured timeout."""


class ChangelogTopicError(ClusterError):
    """A changelog topic is missing and could not be created, or is configured wrongly."""


class MembersTopicError(ClusterError):
    """The members topic could not be created, or is configured so membership cannot work."""


class ChangelogFormatError(ClusterError):
    """A changelog record does not decode; the message names topic, partition and offset."""

    def __init__(self, topic: str, partition: int, offset: int, problem: str) -> None:
        super().__init__(
            f"changelog record at {topic} partition {partition} offset {offset} does not "
            f"decode: {problem}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset


class DeliveryError(ClusterError):
    """Records of a batch were not acknowledged by the cluster: the batch is not durable."""
