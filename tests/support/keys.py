"""Picking keys by the partition Kafka's partitioner puts them in."""

from iqstate.runtime import partition_for_bytes


def key_in(partition: int, partitions: int, candidates: int = 1000) -> str:
    """The first of `key-0`, `key-1`, ... that lands in `partition` of `partitions`."""
    return next(
        f"key-{i}"
        for i in range(candidates)
        if partition_for_bytes(f"key-{i}".encode(), partitions) == partition
    )
