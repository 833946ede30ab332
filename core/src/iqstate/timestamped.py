"""Timestamped key-value stores (Kafka's KIP-992): each value stored with its timestamp.

A timestamped store is a key-value store whose stored value is `timestamp + value`
(8 order-preserving bytes, then the value serde's bytes), the layout of Kafka's
`RocksDBTimestampedStore`: every engine's key-value store holds it as it is, the caching
and change-logging layers pass it through, and a changelog record carries the timestamp in
its value. `TimestampedSerde` is that value encoding over the store's value serde.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from iqstate.queries import ValueAndTimestamp
from iqstate.serdes import Serde, Serdes
from iqstate.times import stored_ms

V = TypeVar("V")
_time = Serdes.int64()
"""The times a store keeps: 8 bytes each."""
_ts, _from_ts = _time.serialize, _time.deserialize


def stamped(timestamp: int, value_bytes: bytes) -> bytes:
    """A serialized value with its timestamp in front, as the store keeps it."""
    return _ts(timestamp) + value_bytes


def check_timestamp(store: str, timestamp: Any, writes: str = "a put") -> int:
    """`timestamp` in ms (an aware `datetime` converted) if a store can keep it; an error
    naming the store (and `writes`, the writes that need it) otherwise."""
    if timestamp is None:
        raise TypeError(
            f"store {store!r}: {writes} needs timestamp=<ms> (an int, or a timezone-aware datetime)"
        )
    return stored_ms(timestamp, "store {!r}: the timestamp of {}", store, writes)


class TimestampedSerde(Serde[ValueAndTimestamp[V]], Generic[V]):
    """`ValueAndTimestamp` as `timestamp + value`, the value through `value_serde`."""

    name = "timestamped"

    def __init__(self, value_serde: Serde[V]) -> None:
        self.value_serde = value_serde
        self._serialize, self._deserialize = value_serde.serialize, value_serde.deserialize

    def serialize(self, value: ValueAndTimestamp[V]) -> bytes:
        if not isinstance(value, ValueAndTimestamp):
            raise TypeError(f"a timestamped store's value is a ValueAndTimestamp, got {value!r}")
        return _ts(value.timestamp) + self._serialize(value.value)

    def deserialize(self, data: bytes) -> ValueAndTimestamp[V]:
        if len(data) < 8:
            raise ValueError(f"a timestamped value needs 8 timestamp bytes, got {len(data)}")
        return ValueAndTimestamp(self._deserialize(data[8:]), _from_ts(data[:8]))

    def deserialize_many(self, data: list[bytes]) -> list[ValueAndTimestamp[V]]:
        values = self.value_serde.deserialize_many([raw[8:] for raw in data])
        return [
            ValueAndTimestamp(value, _from_ts(raw[:8]))
            for raw, value in zip(data, values, strict=True)
        ]
