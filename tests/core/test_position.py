"""Position and PositionBound: value semantics and the lattice laws merge and dominates obey."""

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate import Position, PositionBound, TopicPartition

components = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(st.integers(0, 3), st.integers(0, 50), min_size=1, max_size=3),
    max_size=3,
)
positions = components.map(Position.from_map)


@given(positions, positions)
def test_merge_is_commutative(p: Position, q: Position) -> None:
    assert p.merge(q) == q.merge(p)


@given(positions, positions, positions)
def test_merge_is_associative(p: Position, q: Position, r: Position) -> None:
    assert p.merge(q).merge(r) == p.merge(q.merge(r))


@given(positions)
def test_merge_is_idempotent(p: Position) -> None:
    assert p.merge(p) == p
    assert p.merge(None) is p
    assert p.merge(Position.empty()) == p


@given(positions, st.sampled_from(["a", "b", "z"]), st.integers(0, 3), st.integers(0, 60))
def test_with_component_is_monotonic(p: Position, topic: str, partition: int, offset: int) -> None:
    updated = p.with_component(topic, partition, offset)
    assert updated.dominates(p)
    before = p.partition_offsets(topic).get(partition)
    assert updated.partition_offsets(topic)[partition] == max(offset, before or offset)
    assert p == Position.from_map(p.to_map()), "with_component never changes the receiver"


@given(positions)
def test_dominates_is_reflexive(p: Position) -> None:
    assert p.dominates(p)
    assert p.dominates(Position.empty())


@given(positions, positions)
def test_dominates_is_antisymmetric(p: Position, q: Position) -> None:
    if p.dominates(q) and q.dominates(p):
        assert p == q


@given(positions, positions, positions)
def test_dominates_is_transitive(p: Position, q: Position, r: Position) -> None:
    if p.dominates(q) and q.dominates(r):
        assert p.dominates(r)


@given(positions, positions)
def test_dominates_is_consistent_with_merge(p: Position, q: Position) -> None:
    merged = p.merge(q)
    assert merged.dominates(p) and merged.dominates(q)
    assert p.dominates(q) == (p.merge(q) == p)


@given(positions)
def test_value_semantics(p: Position) -> None:
    copy = Position.from_map(p.to_map())
    assert copy == p and hash(copy) == hash(p)
    assert pickle.loads(pickle.dumps(p)) == p
    assert p.is_empty() == (p == Position.empty())


def test_from_map_copies_its_input() -> None:
    source = {"t": {0: 5}}
    p = Position.from_map(source)
    source["t"][0] = 99
    assert p.partition_offsets("t") == {0: 5}
    exported = p.to_map()
    exported["t"][0] = 1
    assert p.partition_offsets("t")[0] == 5


def test_accessors() -> None:
    p = Position.from_map({"t": {0: 5, 1: 7}, "u": {2: 1}})
    assert p.topics() == frozenset({"t", "u"})
    assert dict(p.partition_offsets("t")) == {0: 5, 1: 7}
    assert dict(p.partition_offsets("missing")) == {}
    assert list(p.components()) == [
        (TopicPartition("t", 0), 5),
        (TopicPartition("t", 1), 7),
        (TopicPartition("u", 2), 1),
    ]
    assert repr(p) == "Position({'t': {0: 5, 1: 7}, 'u': {2: 1}})"
    assert not p.dominates(Position.from_map({"t": {3: 0}}))


def test_positions_are_immutable_and_validated() -> None:
    p = Position.from_map({"t": {0: 5}})
    with pytest.raises(AttributeError):
        p.x = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Position()
    with pytest.raises(TypeError, match="offset"):
        Position.from_map({"t": {0: "5"}})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="topic"):
        Position.empty().with_component("", 0, 1)
    with pytest.raises(TypeError, match="partition"):
        Position.empty().with_component("t", True, 1)
    with pytest.raises(TypeError, match="offsets for topic 't' must map partitions to offsets"):
        Position.from_map({"t": [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"takes \{topic: \{partition: offset\}\}, got list"):
        Position.from_map([("t", {0: 1})])  # type: ignore[arg-type]


def test_position_bound() -> None:
    assert PositionBound.unbounded().is_unbounded()
    assert PositionBound.at(Position.empty()) == PositionBound.unbounded()
    p = Position.from_map({"t": {0: 5}})
    bound = PositionBound.at(p)
    assert not bound.is_unbounded() and bound.position == p
    assert bound.is_satisfied_by(p.with_component("t", 0, 6))
    assert not bound.is_satisfied_by(Position.empty())
    assert hash(bound) == hash(PositionBound.at(Position.from_map({"t": {0: 5}})))
    assert pickle.loads(pickle.dumps(bound)) == bound
    with pytest.raises(TypeError):
        PositionBound.at({"t": {0: 1}})  # type: ignore[arg-type]


def test_topic_partition() -> None:
    tp = TopicPartition("t", 3)
    assert str(tp) == "t-3"
    assert sorted([TopicPartition("t", 2), TopicPartition("a", 9), tp])[0] == TopicPartition("a", 9)
    assert {tp: 1}[TopicPartition("t", 3)] == 1
    with pytest.raises(ValueError, match="partition"):
        TopicPartition("t", -1)
    with pytest.raises(TypeError):
        TopicPartition("t", "0")  # type: ignore[arg-type]
