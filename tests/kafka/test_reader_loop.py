"""The changelog reader's compiled loop (iqstate-speedups' `changelog.hold_known`) hands out
exactly the units, positions and counts of its Python loop, for any run of messages: data
records with batch ids seen before or not, tombstones, markers, records that do not
decode, transient errors, partitions not assigned (one of another topic with an assigned
partition's number), offsets with holes, and units cut by `max_held_records`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message
from hypothesis import given, settings
from hypothesis import strategies as st
from iqstate_kafka import ChangelogConsumer, ChangelogUnit, KafkaCluster, OffsetOutOfRange
from iqstate_kafka import reader as reader_module
from iqstate_kafka.format import BATCH_HEADER, MARKER_KEY, batch_headers, marker_value

from iqstate.position import Position, TopicPartition

pytest.importorskip(
    "iqstate_speedups.changelog", reason="iqstate-speedups is not built here (no C compiler)"
)

ASSIGNED = [TopicPartition("t", 0), TopicPartition("t", 1)]
NOT_ASSIGNED = [TopicPartition("t", 2), TopicPartition("u", 0)]
MAX_HELD = 7

kinds = st.sampled_from(
    ["data", "data", "data", "tombstone", "new id", "marker", "no header", "two headers",
     "no key", "error"]
)  # fmt: skip


@st.composite
def messages(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    offsets = {partition: 0 for partition in ASSIGNED + NOT_ASSIGNED}
    for _ in range(draw(st.integers(0, 60))):
        partition = draw(st.sampled_from(ASSIGNED + NOT_ASSIGNED))
        offsets[partition] += draw(st.sampled_from([1, 1, 1, 2, 5]))
        offset = offsets[partition]
        kind = draw(kinds)
        batch = draw(st.sampled_from([None, 1, 2, 3]))
        where: dict[str, Any] = dict(
            topic=partition.topic, partition=partition.partition, offset=offset
        )
        key = b"k%d" % draw(st.integers(0, 9))
        if kind == "error":
            out.append(Message(error=KafkaError(KafkaError._TRANSPORT), **where))
        elif kind == "marker":
            value = marker_value(batch, Position.from_map({"s": {0: offset}}))
            out.append(Message(key=MARKER_KEY, value=value, **where))
        elif kind == "no key":
            out.append(Message(key=None, value=b"v", headers=batch_headers(batch), **where))
        else:
            headers: Any = batch_headers(1000 + offset if kind == "new id" else batch)
            if kind == "no header":
                headers = None
            elif kind == "two headers":
                headers = [*headers, ("other", b"x")]
            value = None if kind == "tombstone" else b"v%d" % offset
            out.append(Message(key=key, value=value, headers=headers, **where))
    return out


def flushing_markers() -> Iterator[Message]:
    """A marker on every assigned partition far ahead: what is held comes out as units."""
    for partition in ASSIGNED:
        yield Message(
            topic=partition.topic, partition=partition.partition, offset=10_000, key=MARKER_KEY,
            value=marker_value(None, Position.from_map({})),
        )  # fmt: skip


def new_reader() -> ChangelogConsumer:
    # No broker: assigning from given offsets is local, and the topic's metadata is asked
    # for best effort (it times out at once here).
    reader = ChangelogConsumer(KafkaCluster("127.0.0.1:1", timeout=0.05), max_held_records=MAX_HELD)
    for partition in ASSIGNED:
        reader.assign(partition, 1)
    return reader


def described(events: list[ChangelogUnit | OffsetOutOfRange]) -> list[Any]:
    return [
        (e.partition, e.pairs, e.batch_ids, e.offsets, e.marker, e.next_offset, e.compacted)
        if isinstance(e, ChangelogUnit)
        else e
        for e in events
    ]


@pytest.fixture(scope="module")
def readers() -> Iterator[tuple[ChangelogConsumer, ChangelogConsumer]]:
    compiled, python = new_reader(), new_reader()
    yield compiled, python
    compiled.close()
    python.close()


@settings(max_examples=300, deadline=None)
@given(messages())
def test_the_compiled_loop_hands_out_what_the_python_loop_does(
    readers: tuple[ChangelogConsumer, ChangelogConsumer], batch: list[Message]
) -> None:
    compiled, python = readers
    stream = [*batch, *flushing_markers()]
    compiled_events: list[ChangelogUnit | OffsetOutOfRange] = []
    python_events: list[ChangelogUnit | OffsetOutOfRange] = []
    compiled._take(list(stream), compiled_events)
    hold = reader_module._hold_known
    reader_module._hold_known = None
    try:
        python._take(list(stream), python_events)
    finally:
        reader_module._hold_known = hold
    assert described(compiled_events) == described(python_events)
    for partition in ASSIGNED:
        assert compiled.position(partition) == python.position(partition)
        assert compiled.skipped(partition) == python.skipped(partition)


def test_bad_arguments_are_type_errors() -> None:
    from iqstate_speedups.changelog import hold_known

    with pytest.raises(TypeError):
        hold_known((), 0, {}, {}, BATCH_HEADER, MARKER_KEY, 0)
    with pytest.raises(TypeError):
        hold_known([], 0, {}, {}, BATCH_HEADER, MARKER_KEY)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        hold_known([], -1, {}, {}, BATCH_HEADER, MARKER_KEY, 0)
    assert hold_known([], 0, {}, {}, BATCH_HEADER, MARKER_KEY, 0) == 0


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
    reader = new_reader()
    try:
        (marker,) = list(flushing_markers())[:1]
        monkeypatch.setattr(reader, "_consumer", _FailingConsumer(marker))
        events = reader.read(0.1)
        assert [type(event) for event in events] == [ChangelogUnit]
        assert reader.position(ASSIGNED[0]) == 10_001
        data = Message(topic="t", partition=1, offset=1, key=b"k", value=b"v",
                       headers=batch_headers(1))  # fmt: skip
        monkeypatch.setattr(reader, "_consumer", _FailingConsumer(data))
        with pytest.raises(KafkaException):
            reader.read(0.1)  # nothing complete to hand out: the error is raised
    finally:
        monkeypatch.undo()
        reader.close()
