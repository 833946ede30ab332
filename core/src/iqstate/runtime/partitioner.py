"""The partitioning rule: which store partition a key belongs to, for every component.

`partition_function` is the one rule: the runtime's stores, the Spark writers (both write
paths), the HTTP service and the routing client all take a key's partition from it, so a
record lands in the partition that serves it. A store of one partition puts every key in 0;
without a custom partitioner, Kafka's default partitioner picks, `murmur2(key bytes) &
0x7fffffff % partitions`; a custom partitioner's answer is checked by `checked_partition`.

murmur2 is byte for byte the Java client's `Utils.murmur2`, so a key lands in the partition a
Kafka producer would choose for the same serialized key. The hash is computed by the compiled
`murmurhash2` package (a dependency wherever it ships wheels: about 0.1 us a key); where it
is missing, `murmur2_python` (about 2 us a key) gives the same answers.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF

Partitioner = Callable[[Any, int], int | set[int] | frozenset[int] | list[int] | tuple[int]]
"""`partitioner(key, num_partitions) -> partition` for a store's typed keys: one partition
number, or a collection of exactly one (as Kafka's `StreamPartitioner.partitions` answers)."""

PartitionFunction = Callable[[Any, bytes], int]
"""`partition_of(key, key_bytes) -> partition`: a store's rule, chosen once per store."""


_WORD_UNPACKERS: dict[int, Callable[[bytes], tuple[int, ...]]] = {}


def murmur2_python(data: bytes) -> int:
    """Kafka's 32-bit murmur2 hash of `data`, as a signed int like Java's; pure Python."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    words = length >> 2
    unpack = _WORD_UNPACKERS.get(words)
    if unpack is None:
        unpack = _WORD_UNPACKERS[words] = struct.Struct(f"<{words}I").unpack_from
    for k in unpack(data):
        k = (k * _M) & _MASK32
        k ^= k >> 24
        h = ((h * _M) ^ (k * _M)) & _MASK32
    remaining = length & 3
    if remaining:
        tail = words << 2
        if remaining == 3:
            h ^= data[tail + 2] << 16
        if remaining >= 2:
            h ^= data[tail + 1] << 8
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


_compiled_murmur2: Callable[[bytes, int], int] | None
try:
    from murmurhash2 import murmurhash2 as _imported

    _compiled_murmur2 = _imported
except ImportError:  # pragma: no cover - only where the package ships no wheel
    _compiled_murmur2 = None

ACCELERATED = _compiled_murmur2 is not None
"""Whether the compiled murmur2 is in use."""

if _compiled_murmur2 is not None:
    _hash = _compiled_murmur2

    def murmur2(data: bytes) -> int:
        """Kafka's 32-bit murmur2 hash of `data`, as a signed int like Java's."""
        h = _hash(data, _SEED)
        return h - (1 << 32) if h & 0x80000000 else h

    def partition_for_bytes(key: bytes, num_partitions: int) -> int:
        """The partition Kafka's default partitioner picks for serialized `key`."""
        return (_hash(key, _SEED) & 0x7FFFFFFF) % num_partitions

    def murmur2_partitioner(num_partitions: int) -> Callable[[Any, bytes], int]:
        """`(key, key_bytes) -> partition` by Kafka's default partitioner, one call per key."""
        return lambda key, key_bytes: (_hash(key_bytes, _SEED) & 0x7FFFFFFF) % num_partitions

else:  # pragma: no cover - only where the package ships no wheel
    murmur2 = murmur2_python

    def partition_for_bytes(key: bytes, num_partitions: int) -> int:
        """The partition Kafka's default partitioner picks for serialized `key`."""
        return (murmur2_python(key) & 0x7FFFFFFF) % num_partitions

    def murmur2_partitioner(num_partitions: int) -> Callable[[Any, bytes], int]:
        """`(key, key_bytes) -> partition` by Kafka's default partitioner, one call per key."""
        return lambda key, key_bytes: (murmur2_python(key_bytes) & 0x7FFFFFFF) % num_partitions


def partition_function(
    store: str, partitions: int, partitioner: Partitioner | None
) -> PartitionFunction:
    """Store `store`'s `partition_of(key, key_bytes)`, its path picked once (it runs per key).

    One partition: always 0 (the partitioner is not asked). No partitioner: Kafka's default
    partitioner on `key_bytes`. Otherwise the partitioner's answer for `key` (its bytes are
    not read): a plain int in range at once, anything else as `checked_partition` decides.
    """
    if partitions == 1:
        return _only_partition
    if partitioner is None:
        return murmur2_partitioner(partitions)

    def chosen_by_partitioner(key: Any, key_bytes: bytes) -> int:
        chosen = partitioner(key, partitions)
        if chosen.__class__ is int and 0 <= chosen < partitions:
            return chosen
        return checked_partition(chosen, store, partitions)

    return chosen_by_partitioner


def follows_kafka_default(partitions: int, partitioner: Partitioner | None) -> bool:
    """Whether `partition_function` picks what Kafka's default partitioner does for every
    key, so a Kafka producer given only the serialized key writes where the store reads."""
    return partitions == 1 or partitioner is None


def checked_partition(chosen: object, store: str, partitions: int) -> int:
    """A partitioner's answer for store `store`: exactly one partition number in range (an
    int, or a set, frozenset, list or tuple holding one), else a `ValueError` saying why."""
    if not isinstance(chosen, int) or isinstance(chosen, bool):
        picked = list(chosen) if isinstance(chosen, set | frozenset | list | tuple) else None
        if picked is None or len(picked) != 1:
            raise ValueError(
                f"the partitioner of store {store!r} must return one partition, got {chosen!r}"
            )
        chosen = picked[0]
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < partitions:
        raise ValueError(
            f"the partitioner of store {store!r} returned {chosen!r}; the store has "
            f"partitions 0..{partitions - 1}"
        )
    return chosen


def _only_partition(key: Any, key_bytes: bytes) -> int:
    return 0
