"""Source positions: which offsets of which topic partitions a store's data reflects.

A `Position` is an immutable vector `topic -> partition -> offset`. Immutability is
what lets stores hand their position to every query result without copying it, and
lets positions be dictionary keys and set members.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    """A partition of a topic: the unit a changelog offset or a position component names."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"TopicPartition topic must be a non-empty str, got {self.topic!r}")
        if isinstance(self.partition, bool) or not isinstance(self.partition, int):
            raise TypeError(
                f"TopicPartition partition must be an int, got {type(self.partition).__name__}"
            )
        if self.partition < 0:
            raise ValueError(f"TopicPartition partition must be >= 0, got {self.partition}")

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


_Components = dict[str, dict[int, int]]


def _check_component(topic: object, partition: object, offset: object) -> None:
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"Position topic must be a non-empty str, got {topic!r}")
    for label, value in (("partition", partition), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(
                f"Position {label} for topic {topic!r} must be an int, got {type(value).__name__}"
            )


class Position:
    """An immutable, hashable vector of `(topic, partition) -> offset`.

    Every operation that "changes" a position returns a new one; the receiver is never
    modified, so a position can be shared freely between threads and results.
    """

    __slots__ = ("_components", "_hash")

    _components: _Components
    _hash: int | None

    def __init__(self) -> None:
        raise TypeError("use Position.empty() or Position.from_map(...)")

    @classmethod
    def _wrap(cls, components: _Components) -> Position:
        instance = object.__new__(cls)
        object.__setattr__(instance, "_components", components)
        object.__setattr__(instance, "_hash", None)
        return instance

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Position is immutable")

    @classmethod
    def empty(cls) -> Position:
        """The position of a store that has seen nothing."""
        return _EMPTY

    @classmethod
    def from_map(cls, components: Mapping[str, Mapping[int, int]] | None) -> Position:
        """Build a position from `{topic: {partition: offset}}`; the input is copied."""
        if not components:
            return _EMPTY
        if not isinstance(components, Mapping):
            raise TypeError(
                "Position.from_map takes {topic: {partition: offset}}, got "
                f"{type(components).__name__}"
            )
        copied: _Components = {}
        for topic, offsets in components.items():
            if not isinstance(offsets, Mapping):
                raise TypeError(
                    f"Position offsets for topic {topic!r} must map partitions to offsets, "
                    f"got {type(offsets).__name__}"
                )
            if not offsets:
                continue
            inner: dict[int, int] = {}
            for partition, offset in offsets.items():
                _check_component(topic, partition, offset)
                inner[partition] = offset
            copied[topic] = inner
        return cls._wrap(copied) if copied else _EMPTY

    def with_component(self, topic: str, partition: int, offset: int) -> Position:
        """This position with `(topic, partition)` at `offset`, keeping the larger offset."""
        _check_component(topic, partition, offset)
        current = self._components.get(topic)
        if current is not None and current.get(partition, offset - 1) >= offset:
            return self
        copied = dict(self._components)
        copied[topic] = {**(current or {}), partition: offset}
        return Position._wrap(copied)

    def merge(self, other: Position | None) -> Position:
        """The per-component maximum of both positions; `merge(None)` is `self`."""
        if other is None or other is self or not other._components:
            return self
        if not self._components:
            return other
        merged: _Components | None = None
        for topic, offsets in other._components.items():
            mine = self._components.get(topic)
            if mine is None:
                merged = merged if merged is not None else dict(self._components)
                merged[topic] = offsets
                continue
            for partition, offset in offsets.items():
                if mine.get(partition, offset - 1) < offset:
                    merged = merged if merged is not None else dict(self._components)
                    target = merged[topic]
                    if target is mine:
                        target = merged[topic] = dict(mine)
                    target[partition] = offset
        return self if merged is None else Position._wrap(merged)

    def dominates(self, other: Position) -> bool:
        """True iff every component of `other` is in `self` with an offset at least as large."""
        for topic, offsets in other._components.items():
            mine = self._components.get(topic)
            if mine is None:
                return False
            for partition, offset in offsets.items():
                if mine.get(partition, offset - 1) < offset:
                    return False
        return True

    def topics(self) -> frozenset[str]:
        return frozenset(self._components)

    def partition_offsets(self, topic: str) -> Mapping[int, int]:
        """The offsets of `topic` by partition; empty for a topic this position lacks."""
        offsets = self._components.get(topic)
        return MappingProxyType(offsets) if offsets is not None else _NO_OFFSETS

    def to_map(self) -> dict[str, dict[int, int]]:
        """A fresh, mutable `{topic: {partition: offset}}` copy."""
        return {topic: dict(offsets) for topic, offsets in self._components.items()}

    def is_empty(self) -> bool:
        return not self._components

    def components(self) -> Iterator[tuple[TopicPartition, int]]:
        """Every `(TopicPartition, offset)` pair, ordered by topic then partition."""
        for topic in sorted(self._components):
            offsets = self._components[topic]
            for partition in sorted(offsets):
                yield TopicPartition(topic, partition), offsets[partition]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self._components == other._components

    def __hash__(self) -> int:
        cached = self._hash
        if cached is None:
            cached = hash(
                frozenset(
                    (topic, frozenset(offsets.items()))
                    for topic, offsets in self._components.items()
                )
            )
            object.__setattr__(self, "_hash", cached)
        return cached

    def __repr__(self) -> str:
        return f"Position({self.to_map()!r})"

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (Position.from_map, (self.to_map(),))


_EMPTY: Final = Position._wrap({})
_NO_OFFSETS: Final[Mapping[int, int]] = MappingProxyType({})


class PositionBound:
    """The least position a store partition must have reached to answer a query."""

    __slots__ = ("_position",)

    _position: Position

    def __init__(self) -> None:
        raise TypeError("use PositionBound.unbounded() or PositionBound.at(position)")

    @classmethod
    def at(cls, position: Position) -> PositionBound:
        if not isinstance(position, Position):
            raise TypeError(f"PositionBound.at needs a Position, got {type(position).__name__}")
        if position.is_empty():
            return _UNBOUNDED
        instance = object.__new__(cls)
        object.__setattr__(instance, "_position", position)
        return instance

    @classmethod
    def unbounded(cls) -> PositionBound:
        return _UNBOUNDED

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("PositionBound is immutable")

    @property
    def position(self) -> Position:
        return self._position

    def is_unbounded(self) -> bool:
        return self._position.is_empty()

    def is_satisfied_by(self, position: Position) -> bool:
        """True iff a store at `position` is up to this bound."""
        return position.dominates(self._position)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PositionBound):
            return NotImplemented
        return self._position == other._position

    def __hash__(self) -> int:
        return hash(self._position)

    def __repr__(self) -> str:
        if self.is_unbounded():
            return "PositionBound.unbounded()"
        return f"PositionBound.at({self._position!r})"

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (PositionBound.at, (self._position,))


_UNBOUNDED: Final = object.__new__(PositionBound)
object.__setattr__(_UNBOUNDED, "_position", _EMPTY)
