"""`ChangelogConsumer.read` takes the consumer's messages in chunks; a chunk failing after
a unit was complete must not lose that unit (its records were already taken from the
partition's held data and its offset passed)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Message
from iqstate_kafka import ChangelogConsumer, ChangelogUnit, KafkaCluster
from iqstate_kafka.format import MARKER_KEY, batch_headers, marker_value

from iqstate.position import Position, TopicPartition

PARTITION = TopicPartition("t", 0)


class _FailingConsumer:
    """Gives one message, then fails as a consumer whose broker went away may."""

    def __init__(self, first: Message) -> None:
        self.first = first

    def poll(self, timeout: float) -> Message:
        return self.first

    def consume(self, count: int, timeout: float) -> list[Message]:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))


def test_a_failing_consume_after_a_unit_is_complete_hands_out_the_unit_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No broker: assigning from a given offset is local, and the topic's metadata is asked
    # for best effort (it times out at once here).
    reader = ChangelogConsumer(KafkaCluster("127.0.0.1:1", timeout=0.05))
    try:
        reader.assign(PARTITION, 1)
        marker = Message(
            topic="t", partition=0, offset=10_000, key=MARKER_KEY,
            value=marker_value(None, Position.from_map({})),
        )  # fmt: skip
        monkeypatch.setattr(reader, "_consumer", _FailingConsumer(marker))
        events = reader.read(0.1)
        assert [type(event) for event in events] == [ChangelogUnit]
        assert reader.position(PARTITION) == 10_001
        data = Message(topic="t", partition=0, offset=10_001, key=b"k", value=b"v",
                       headers=batch_headers(1))  # fmt: skip
        monkeypatch.setattr(reader, "_consumer", _FailingConsumer(data))
        with pytest.raises(KafkaException):
            reader.read(0.1)  # nothing complete to hand out: the error is raised
    finally:
        monkeypatch.undo()
        reader.close()
