"""Answering an IQv2 request against the partitions this instance hosts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from iqstate.position import PositionBound
from iqstate.queries import (
    KeyQuery,
    MultiVersionedKeyQuery,
    Query,
    TimestampedKeyQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.request import StateQueryRequest
from iqstate.results import FailureReason, QueryResult, StateQueryResult, partition_results_of
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.spec import StoreSpec
from iqstate.store import QueryConfig
from iqstate.store_exceptions import log_store_exception

_KEYED_QUERIES = frozenset(
    {KeyQuery, WindowKeyQuery, TimestampedKeyQuery, VersionedKeyQuery, MultiVersionedKeyQuery}
)
"""Query types about one key (a `WindowRangeQuery` is when it names a key): only the key's
partition can answer them."""


def keyed(query: Query[Any]) -> bool:
    """Whether only one key's partition can answer `query`."""
    kind = type(query)
    return kind in _KEYED_QUERIES or (
        kind is WindowRangeQuery and query.key is not None  # type: ignore[attr-defined]
    )


_DEFAULT, _WITH_INFO = QueryConfig.DEFAULT, QueryConfig.WITH_EXECUTION_INFO


def partitions_to_ask(
    spec: StoreSpec, request: StateQueryRequest[Any], hosted: Mapping[int, HostedPartition]
) -> Iterable[int]:
    """Requested partitions; for all-partition key lookups, just the key's partition
    (hosted here or not: one hosted elsewhere answers `NOT_PRESENT`, never a false absent).

    Only the key's partition can hold a key, so asking the others would only add `None`
    answers; when the key cannot be serialized every hosted partition is asked, and each
    reports the serde's error as `STORE_EXCEPTION`.
    """
    if request.partition_set is not None:
        return sorted(request.partition_set)
    query = request.query
    if keyed(query):
        located = locate_key(spec, query.key)  # type: ignore[attr-defined]
        if located is not None:
            return (located[0],)
    return sorted(hosted)


def locate_key(spec: StoreSpec, key: Any) -> tuple[int, bytes] | None:
    """The key's partition and bytes; `None` when the key serde refuses the key."""
    key_bytes = key_bytes_of(spec, key)
    return None if key_bytes is None else (spec.partition_of(key, key_bytes), key_bytes)


def key_bytes_of(spec: StoreSpec, key: Any) -> bytes | None:
    """The key serialized with the store's serde; `None` when the serde refuses it (each
    partition asked then reports the serde's error)."""
    try:
        return spec.quick_key_serializer(key)
    except Exception:
        return serialized_key(spec, key)  # `serialize` may take keys its quick serializer does not


def serialized_key(spec: StoreSpec, key: Any) -> bytes | None:
    """The key serialized with the key serde's `serialize`; `None` when it refuses the key."""
    try:
        return spec.key_serde.serialize(key)
    except Exception:
        return None


def query_partition(
    spec: StoreSpec,
    hosted: HostedPartition | None,
    partition: int,
    query: Query[Any],
    bound: PositionBound,
    require_active: bool,
    config: QueryConfig,
    key_bytes: bytes | None = None,
) -> QueryResult[Any]:
    """One partition's answer; every problem is a failed result, never an exception.

    `key_bytes`, for a `KeyQuery` on a key-value store, is its key already serialized.
    """
    if hosted is not None and (not require_active or hosted.role.is_running_active):
        lock = hosted.lock
        lock.acquire()  # not `with`: on a C lock it costs twice as much, on the hottest path
        try:
            if not hosted.closed:
                try:
                    if key_bytes is None:
                        return hosted.chain.query(query, bound, config)
                    return hosted.chain.key_lookup(query, key_bytes, bound, config)  # type: ignore[arg-type]
                except Exception as exc:  # a layer failing is this partition's failure
                    return failed(spec, hosted, partition, query, exc)
        finally:
            lock.release()
    return unanswered(spec, hosted, partition)


def failed(
    spec: StoreSpec, hosted: HostedPartition, partition: int, query: Query[Any], exc: Exception
) -> QueryResult[Any]:
    """The failed result of a partition whose chain raised `exc` (the caller holds its lock)."""
    log_store_exception(
        f"store {spec.name!r} partition {partition} answering {type(query).__name__}", exc
    )
    failure = QueryResult.for_failure(
        FailureReason.STORE_EXCEPTION,
        f"store {spec.name!r} partition {partition} failed to handle {query!r}: "
        f"{type(exc).__name__}: {exc}",
    )
    failure.position = hosted.chain.position
    return failure


def unanswered(spec: StoreSpec, hosted: HostedPartition | None, partition: int) -> QueryResult[Any]:
    """Why a partition that `query_partition` could not ask did not answer."""
    if not 0 <= partition < spec.partitions:
        return QueryResult.for_failure(
            FailureReason.DOES_NOT_EXIST,
            f"Partition {partition} does not exist in store {spec.name!r}, which has "
            f"partitions 0..{spec.partitions - 1}.",
        )
    if hosted is None:
        return QueryResult.for_failure(
            FailureReason.NOT_PRESENT,
            f"Partition {partition} of store {spec.name!r} was not present on this instance "
            "at the time of the query.",
        )
    if hosted.closed:
        return QueryResult.for_failure(
            FailureReason.NOT_PRESENT,
            f"Partition {partition} of store {spec.name!r} moved away from this instance "
            "during the query.",
        )
    why = (
        ": this instance has not heard from its cluster for longer than the liveness "
        "timeout, so the others will have moved the partition"
        if hosted.role.cut_off
        else ""
    )
    failure = QueryResult.for_failure(
        FailureReason.NOT_ACTIVE,
        f"Query requires a running active replica, but partition {partition} of store "
        f"{spec.name!r} is {hosted.role.state} here{why}.",
    )
    failure.position = hosted.chain.position
    return failure


def execute(
    spec: StoreSpec, request: StateQueryRequest[Any], hosted: Mapping[int, HostedPartition]
) -> StateQueryResult[Any]:
    """The request's answer from the partitions hosted here, one result per partition asked."""
    query = request.query
    config = _WITH_INFO if request.is_execution_info_enabled else _DEFAULT
    bound, require_active = request.position_bound, request.is_require_active
    key_bytes = None
    if type(query) in spec.key_lookups:
        # The hot path: a key lookup asks the chain with the key's bytes, and across the
        # store only the key's partition (found from those bytes), or the one partition
        # the request names (Kafka's idiom, `withPartitions` naming the key's partition).
        # A key the serde refuses takes the general path, where each partition reports
        # the serde's error.
        key = query.key  # type: ignore[attr-defined]
        try:
            key_bytes = spec.quick_key_serializer(key)  # `key_bytes_of`, without its frame
        except Exception:
            key_bytes = serialized_key(spec, key)
        named = request.partition_set
        if key_bytes is not None and (named is None or len(named) == 1):
            if named is None:
                partition = 0 if spec.partitions == 1 else spec.partition_of(key, key_bytes)
            else:
                (partition,) = named
            answer = query_partition(
                spec, hosted.get(partition), partition, query, bound, require_active, config,
                key_bytes,
            )  # fmt: skip
            return partition_results_of({partition: answer})
    results = {}
    for number in partitions_to_ask(spec, request, hosted):
        results[number] = query_partition(
            spec, hosted.get(number), number, query, bound, require_active, config, key_bytes
        )
    return StateQueryResult(results)
