"""IQv2 through the application: every failure reason and exception, bounds, roles."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from support.keys import key_in as support_key_in

from iqstate import (
    ACTIVE,
    ACTIVE_RESTORING,
    STANDBY,
    Application,
    Assignment,
    FailureReason,
    HostInfo,
    InvalidStateStoreError,
    KeyQuery,
    Position,
    PositionBound,
    Query,
    QueryResult,
    RangeQuery,
    StateQueryRequest,
    StaticAssignment,
    StreamsNotStartedError,
    StreamsStoppedError,
    UnknownStateStoreError,
)
from iqstate.engines.memory import MemoryKeyValueStore
from iqstate.plugins import PluginRegistry, make_plugin_manager
from iqstate.queries import LimitedRangeQuery
from iqstate.runtime.assignment import PartitionRole, Role
from iqstate.serdes import StringSerde

MakeApp = Callable[..., Application]
HOST = HostInfo("localhost", 7070)
OTHER = HostInfo("other", 7070)
AT = Position.from_map({"src": {0: 10}})


def request(query: Query[Any], store: str = "s") -> Any:
    return StateQueryRequest.in_store(store).with_query(query)


def key_in(partition: int, partitions: int = 4) -> str:
    return support_key_in(partition, partitions)


@pytest.fixture
def mixed_app(make_app: MakeApp) -> Application:
    """Partition 0 running active, 1 restoring active, 2 standby, 3 hosted elsewhere."""
    cluster = {
        HOST: Assignment({"s": {0: ACTIVE, 1: ACTIVE_RESTORING, 2: STANDBY}}),
        OTHER: Assignment({"s": {3: ACTIVE, 2: ACTIVE, 0: STANDBY}}),
    }
    app = make_app(assignment=StaticAssignment(cluster))
    app.key_value_store("s", 4)
    app.start()
    with app.begin_batch(position=AT, batch_id=1) as batch:
        batch.put("s", key_in(0), "zero")
    return app


def test_every_failure_reason_per_partition(mixed_app: Application) -> None:
    result = mixed_app.query(
        request(RangeQuery.with_no_bounds()).with_partitions({0, 1, 2, 3, 4}).require_active()
    )
    reasons = {
        p: (r.failure_reason if r.is_failure else "ok") for p, r in result.partition_results.items()
    }
    assert reasons == {
        0: "ok",
        1: FailureReason.NOT_ACTIVE,
        2: FailureReason.NOT_ACTIVE,
        3: FailureReason.NOT_PRESENT,
        4: FailureReason.DOES_NOT_EXIST,
    }
    parts = result.partition_results
    assert "RESTORING" in parts[1].failure_message and "STANDBY" in parts[2].failure_message
    assert "0..3" in parts[4].failure_message
    assert parts[0].position == AT and parts[1].position is not None, (
        "hosted partitions set positions"
    )


def test_only_an_active_neither_restoring_nor_cut_off_is_running_active() -> None:
    cut_off = PartitionRole(Role.ACTIVE, cut_off=True)
    assert ACTIVE.is_running_active
    assert not any(role.is_running_active for role in (ACTIVE_RESTORING, cut_off, STANDBY))
    assert PartitionRole(Role.ACTIVE) == ACTIVE and "is_running_active" not in repr(ACTIVE)


def test_standby_and_restoring_answer_without_require_active(mixed_app: Application) -> None:
    result = mixed_app.query(request(RangeQuery.with_no_bounds()))
    assert sorted(result.partition_results) == [0, 1, 2], (
        "all-partition requests ask what is hosted"
    )
    assert all(r.is_success for r in result.partition_results.values())


def test_position_bound(mixed_app: Application) -> None:
    reached = (
        request(RangeQuery.with_no_bounds())
        .with_partitions({0})
        .with_position_bound(PositionBound.at(AT))
    )
    assert mixed_app.query(reached).partition_results[0].is_success
    ahead = PositionBound.at(Position.from_map({"src": {0: 11}}))
    behind = mixed_app.query(reached.with_position_bound(ahead)).partition_results[0]
    assert behind.failure_reason is FailureReason.NOT_UP_TO_BOUND
    assert behind.position == AT
    active_but_behind = reached.with_position_bound(ahead).require_active()
    result = mixed_app.query(active_but_behind).partition_results[0]
    assert result.failure_reason is FailureReason.NOT_UP_TO_BOUND, "require_active keeps the bound"


def test_key_lookup_over_all_partitions_asks_the_keys_partition(mixed_app: Application) -> None:
    result = mixed_app.query(request(KeyQuery.with_key(key_in(0))))
    assert list(result.partition_results) == [0]
    only = result.only_partition_result()
    assert only is not None and only.result == "zero" and result.position == AT
    # hosted elsewhere: the key's partition says so, never a false absent
    elsewhere = mixed_app.query(request(KeyQuery.with_key(key_in(3)))).partition_results
    assert list(elsewhere) == [3] and elsewhere[3].failure_reason is FailureReason.NOT_PRESENT
    assert "Partition 3 of store" in elsewhere[3].failure_message
    explicit = mixed_app.query(request(KeyQuery.with_key(key_in(0))).with_partitions({0, 1}))
    assert sorted(explicit.partition_results) == [0, 1]
    assert explicit.partition_results[1].result is None


@pytest.mark.parametrize("partition", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("active", [True, False])
def test_a_key_lookup_naming_one_partition_answers_as_any_query_would(
    mixed_app: Application, partition: int, active: bool
) -> None:
    """The key lookup's direct path gives each partition the answer, or the failure reason
    and message, that the general path gives any query there."""
    lookup = request(KeyQuery.with_key(key_in(0))).with_partitions({partition})
    scan = request(RangeQuery.with_no_bounds()).with_partitions({partition})
    if active:
        lookup, scan = lookup.require_active(), scan.require_active()
    got = mixed_app.query(lookup).partition_results[partition]
    general = mixed_app.query(scan).partition_results[partition]
    assert got.is_failure == general.is_failure
    if got.is_failure:
        assert (got.failure_reason, got.failure_message, got.position) == (
            general.failure_reason,
            general.failure_message,
            general.position,
        )
    else:
        assert got.result == ("zero" if partition == 0 else None)
        assert got.position == general.position


def test_merged_position_and_execution_info(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 2)
    with app:
        with app.begin_batch(position={"src": {0: 3, 1: 4}}) as batch:
            batch.put("s", "k", 1)
        result = app.query(request(RangeQuery.with_no_bounds()).enable_execution_info())
        assert result.position == Position.from_map({"src": {0: 3, 1: 4}})
        for partition_result in result.partition_results.values():
            info = partition_result.execution_info
            assert [entry.split(" store ")[0] for entry in info] == [
                "memory.key_value",
                "metered.key_value",
            ]


class Unanswerable(Query[int]):
    __slots__ = ()


class Exploding(Query[int]):
    __slots__ = ()


class _ExplodingPlugin:
    from iqstate.hookspecs import hookimpl

    @hookimpl
    def iqstate_register_query_handlers(self, register: Any) -> None:
        def explode(store: Any, query: Any, bound: Any, config: Any) -> QueryResult[int]:
            raise OSError("disk gone")

        register(Exploding, MemoryKeyValueStore.kind, explode)


def test_unknown_query_type_and_store_exception(make_app: MakeApp) -> None:
    plugins = PluginRegistry.from_plugin_manager(
        make_plugin_manager(load_entry_points=False, extra_plugins=[("boom", _ExplodingPlugin())])
    )
    app = make_app(plugins=plugins)
    app.key_value_store("s", 2)
    with app:
        unknown = app.query(request(Unanswerable()))
        assert {r.failure_reason for r in unknown.partition_results.values()} == {
            FailureReason.UNKNOWN_QUERY_TYPE
        }
        # named with its engine's kind too, the one an engine's handlers are registered for
        message = unknown.partition_results[0].failure_message
        assert "(metered.key_value store 's' over memory.key_value)" in message
        traced = app.query(request(Unanswerable()).enable_execution_info())
        for answer in traced.partition_results.values():  # each layer says it passed it down
            assert answer.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
            assert len(answer.execution_info) >= 2
            assert all("passed down" in entry for entry in answer.execution_info[1:])
        exploded = app.query(request(Exploding()).with_partitions({1}))
        failure = exploded.partition_results[1]
        assert failure.failure_reason is FailureReason.STORE_EXCEPTION
        assert "OSError" in failure.failure_message and "disk gone" in failure.failure_message
        assert failure.position is not None


@pytest.mark.usefixtures("store_exception_log")
def test_a_store_exception_is_logged_with_its_traceback_once_a_window(
    make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    plugins = PluginRegistry.from_plugin_manager(
        make_plugin_manager(load_entry_points=False, extra_plugins=[("boom", _ExplodingPlugin())])
    )
    app = make_app(plugins=plugins)
    app.key_value_store("logged", 2)
    with app, caplog.at_level(logging.WARNING, logger="iqstate.store_exceptions"):
        for _ in range(3):
            app.query(request(Exploding(), store="logged").with_partitions({1}))
        app.query(request(Exploding(), store="logged").with_partitions({0}))
    lines = [r for r in caplog.records if r.name == "iqstate.store_exceptions"]
    assert [r.getMessage() for r in lines] == [
        f"memory.key_value store 'logged' partition {p} answering Exploding failed (OSError): "
        "disk gone"
        for p in (1, 0)
    ], "one line per partition: the repeats within 30 s are held back"
    assert all(r.exc_info and "explode" in caplog.text for r in lines), "with the traceback"


def test_key_of_the_wrong_type_is_a_per_partition_failure(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 2)
    with app:
        result = app.query(request(KeyQuery.with_key(12)))
        assert {r.failure_reason for r in result.partition_results.values()} == {
            FailureReason.STORE_EXCEPTION
        }
        assert "serde string" in result.partition_results[0].failure_message


def test_exceptions_for_unknown_store_not_started_and_stopped(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1)
    with pytest.raises(UnknownStateStoreError, match="declared stores: s"):
        app.query(request(KeyQuery.with_key("k"), store="missing"))
    with pytest.raises(StreamsNotStartedError, match="start"):
        app.query(request(KeyQuery.with_key("k")))
    app.start()
    app.close()
    with pytest.raises(StreamsStoppedError, match="NOT_RUNNING"):
        app.query(request(KeyQuery.with_key("k")))
    for error in (UnknownStateStoreError, StreamsNotStartedError, StreamsStoppedError):
        assert issubclass(error, InvalidStateStoreError)


def test_instance_with_no_partitions(make_app: MakeApp) -> None:
    cluster = {OTHER: Assignment({"s": {0: ACTIVE, 1: ACTIVE}})}
    app = make_app(assignment=StaticAssignment(cluster))
    app.key_value_store("s", 2)
    with app:
        assert app.query(request(RangeQuery.with_no_bounds())).partition_results == {}
        explicit = app.query(request(RangeQuery.with_no_bounds()).with_partitions({0, 1}))
        assert {r.failure_reason for r in explicit.partition_results.values()} == {
            FailureReason.NOT_PRESENT
        }
        with app.begin_batch(position={"src": {0: 1}}) as batch:
            pass
        assert batch.applied == frozenset(), "nothing hosted, nothing committed"


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "lmdb"])
@pytest.mark.parametrize("caching", [False, True])
def test_a_limited_range_is_the_first_pairs_of_the_range_through_every_layer(
    make_app: MakeApp, engine: str, caching: bool
) -> None:
    """`LimitedRangeQuery` (how the HTTP service reads a page) through the metered and
    caching layers: typed pairs, the range's first `limit`, buffered writes merged in."""
    app = make_app()
    app.key_value_store("s", 1, engine=engine, key_serde="int64", caching=caching)
    app.start()
    with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
        batch.put_all("s", [(k, f"v{k}") for k in range(-20, 20)])
        batch.delete("s", 3)
    for lower, upper, descending, limit in [
        (None, None, False, 5), (-3, 10, False, 4), (-3, 10, True, 4), (0, None, True, 100),
    ]:  # fmt: skip
        request = StateQueryRequest.in_store("s").with_query(
            LimitedRangeQuery(lower, upper, descending, limit)
        )
        answer = app.query(request).partition_results[0]
        keys = [k for k in range(-20, 20) if k != 3]
        keys = [k for k in keys if (lower is None or k >= lower) and (upper is None or k <= upper)]
        expected = (keys[::-1] if descending else keys)[:limit]
        assert list(answer.result) == [(k, f"v{k}") for k in expected]
        assert answer.position == Position.from_map({"src": {0: 1}})


class LowerCaseKeys(StringSerde):
    """A string serde subclass that codes differently: keys are stored lower-cased."""

    def serialize(self, value: str) -> bytes:
        return super().serialize(value.lower())


class UpperCaseValues(StringSerde):
    def deserialize(self, data: bytes) -> str:
        return super().deserialize(data).upper()


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "lmdb"])
def test_key_lookups_code_keys_and_values_with_a_serde_subclass_own_methods(
    make_app: MakeApp, engine: str
) -> None:
    app = make_app()
    app.key_value_store(
        "s", 4, engine=engine, key_serde=LowerCaseKeys(), value_serde=UpperCaseValues()
    )
    with app:
        with app.begin_batch(position=AT, batch_id=1) as batch:
            batch.put("s", "KEY", "hello")
        only = app.query(request(KeyQuery.with_key("Key"))).only_partition_result()
        assert only is not None and only.result == "HELLO"


def test_a_bytes_key_given_as_a_bytearray_asks_only_its_partition(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 4, key_serde="bytes", value_serde="string")
    with app:
        with app.begin_batch(position=AT, batch_id=1) as batch:
            batch.put("s", b"key", "value")
        result = app.query(request(KeyQuery.with_key(bytearray(b"key"))))
        assert len(result.partition_results) == 1
        only = result.only_partition_result()
        assert only is not None and only.result == "value"
