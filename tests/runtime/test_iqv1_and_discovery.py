"""IQv1 facades, discovery metadata, lags, and rebalances driven through a provider."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

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
    InMemoryChangelog,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    KeyQueryMetadata,
    LagInfo,
    QueryableStoreTypes,
    RangeQuery,
    Serdes,
    SerializationError,
    StateQueryRequest,
    StaticAssignment,
    StoreQueryParameters,
    StreamsMetadata,
    StreamsNotStartedError,
    StreamsStoppedError,
    TopicPartition,
    UnknownStateStoreError,
    ValueAndTimestamp,
    Windowed,
)
from iqstate.runtime import partition_for_bytes

MakeApp = Callable[..., Application]
HOST = HostInfo("localhost", 7070)
OTHER = HostInfo("other", 7071)
KV = QueryableStoreTypes.key_value_store()


def key_in(partition: int, partitions: int = 2) -> str:
    return support_key_in(partition, partitions)


@pytest.fixture
def two_hosts() -> StaticAssignment:
    return StaticAssignment(
        {
            HOST: Assignment({"s": {0: ACTIVE, 1: STANDBY}}),
            OTHER: Assignment({"s": {1: ACTIVE, 0: STANDBY}}),
        },
        end_offsets={("s", 1): 10},
    )


def test_key_value_facade_across_partitions(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 3)
    with app:
        with app.begin_batch() as batch:
            for i in range(9):
                batch.put("s", f"k{i}", i)
        store = app.store(StoreQueryParameters.from_name_and_type("s", KV))
        assert store.get("k4") == 4 and store.get("missing") is None
        assert sorted(store.all()) == [(f"k{i}", i) for i in range(9)]
        assert sorted(store.range("k2", "k4")) == [("k2", 2), ("k3", 3), ("k4", 4)]
        assert sorted(store.reverse_range("k2", "k3")) == [("k2", 2), ("k3", 3)]
        assert sorted(store.prefix_scan("k1")) == [("k1", 1)]
        assert sorted(store.reverse_all()) == sorted(store.all())
        assert store.approximate_num_entries() == 9
        with pytest.raises(AttributeError):
            store.put("k", 1)  # type: ignore[attr-defined]
        # a key the store's serde refuses is named with the store, as in writes and ranges
        with pytest.raises(SerializationError, match="store 's': serde .* the key 5 of type int"):
            store.get(5)
        one = app.store(StoreQueryParameters.from_name_and_type("s", KV).with_partition(0))
        in_zero = [k for k, _ in one.all()]
        assert in_zero and all(partition_for_bytes(k.encode(), 3) == 0 for k in in_zero)


def test_window_facade(make_app: MakeApp) -> None:
    app = make_app()
    app.window_store("w", 2, window_size_ms=10, retention_ms=1_000, value_serde=Serdes.int64())
    with app:
        with app.begin_batch() as batch:
            batch.put("w", "a", 1, window_start=0)
            batch.put("w", "a", 2, window_start=10)
            batch.put("w", "b", 3, window_start=10)
        windows = app.store(
            StoreQueryParameters.from_name_and_type("w", QueryableStoreTypes.window_store())
        )
        assert list(windows.fetch("a", 0, 100)) == [(0, 1), (10, 2)]
        # Kafka's fetch(key, time): the value of the window starting exactly there
        assert (windows.fetch("a", 10), windows.fetch("b", 10)) == (2, 3)
        assert windows.fetch("a", 5) is None and windows.fetch("zz", 0) is None
        assert sorted(windows.fetch_all(10, 10)) == [
            (Windowed("a", 10, 20), 2),
            (Windowed("b", 10, 20), 3),
        ]
        assert len(list(windows.all())) == 3
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        at_10 = epoch + timedelta(milliseconds=10)
        assert list(windows.fetch("a", epoch, at_10)) == [(0, 1), (10, 2)]  # datetimes too
        assert windows.fetch("a", at_10) == 2
        assert len(list(windows.fetch_all(at_10, at_10))) == 2
        with pytest.raises(TypeError, match="time_from is a datetime without a timezone"):
            windows.fetch("a", datetime(1970, 1, 1), at_10)


SESSIONS = {"a": [(0, 5, 1), (10, 10, 2), (20, 40, 3)], "b": [(3, 30, 4)]}
"""Sessions `(start, end, value)` by key, for the session facade."""


@pytest.mark.parametrize("engine", ["memory", "rocksdb", "lmdb"])
def test_session_facade_finds_overlapping_sessions_as_kafka_does(
    make_app: MakeApp, engine: str
) -> None:
    app = make_app()
    app.session_store("s", 2, retention_ms=1_000, engine=engine, value_serde=Serdes.int64())
    with app:
        with app.begin_batch() as batch:
            for key, sessions in SESSIONS.items():
                for start, end, value in sessions:
                    batch.put("s", key, value, session=(start, end))
        store = app.store(
            StoreQueryParameters.from_name_and_type("s", QueryableStoreTypes.session_store())
        )
        assert list(store.fetch("a")) == [(Windowed("a", s, e), v) for s, e, v in SESSIONS["a"]]
        assert list(store.backward_fetch("a")) == list(store.fetch("a"))[::-1]
        assert list(store.fetch("nobody")) == []
        times = range(-1, 43, 3)
        for key, sessions in SESSIONS.items():
            for earliest_end in times:
                for latest_start in times:
                    overlapping = [
                        (Windowed(key, s, e), v)
                        for s, e, v in sessions
                        if e >= earliest_end and s <= latest_start
                    ]
                    found = store.find_sessions(key, earliest_end, latest_start)
                    assert list(found) == overlapping, (key, earliest_end, latest_start)
                    backward = store.backward_find_sessions(key, earliest_end, latest_start)
                    assert list(backward) == overlapping[::-1]
            for start, end, value in sessions:
                assert store.fetch_session(key, start, end) == value
                assert store.fetch_session(key, start, end + 1) is None
        assert store.fetch_session("a", 1, 5) is None
        with pytest.raises(TypeError, match="earliest_session_end_time must be an int"):
            store.find_sessions("a", "soon", 5)
        for read in (store.fetch, store.backward_fetch):
            with pytest.raises(ValueError, match="key must not be None"):
                read(None)
        with pytest.raises(ValueError, match="key must not be None"):
            store.fetch_session(None, 0, 5)
        with pytest.raises(InvalidStateStoreError, match="QueryableStoreTypes|does not accept"):
            app.store(StoreQueryParameters.from_name_and_type("s", KV))


def test_a_timestamped_store_read_as_a_key_value_store_has_plain_values(
    make_app: MakeApp,
) -> None:
    """As in Kafka: `key_value_store()` strips the timestamps, as IQv2's `KeyQuery` does;
    `timestamped_key_value_store()` keeps them, and refuses a plain store."""
    app = make_app()
    app.timestamped_key_value_store("prices", 2, value_serde="float64")
    app.key_value_store("plain", 1)
    with app:
        with app.begin_batch() as batch:
            batch.put("prices", "AAPL", 1.5, timestamp=5)
            batch.put("prices", "MSFT", 2.5, timestamp=7)
        plain = app.store(StoreQueryParameters.from_name_and_type("prices", KV))
        assert plain.get("AAPL") == 1.5
        assert plain.get("NONE") is None
        assert sorted(plain.range("A", "Z")) == [("AAPL", 1.5), ("MSFT", 2.5)]
        assert sorted(plain.all()) == [("AAPL", 1.5), ("MSFT", 2.5)]
        timestamped_type = QueryableStoreTypes.timestamped_key_value_store()
        stamped = app.store(StoreQueryParameters.from_name_and_type("prices", timestamped_type))
        assert stamped.get("MSFT") == ValueAndTimestamp(2.5, 7)
        with pytest.raises(
            InvalidStateStoreError, match=r"\[timestamped_key_value\].*\[key_value\]"
        ):
            app.store(StoreQueryParameters.from_name_and_type("plain", timestamped_type))


def test_facade_errors(make_app: MakeApp, two_hosts: StaticAssignment) -> None:
    app = make_app(assignment=two_hosts)
    app.key_value_store("s", 2)
    app.window_store("w", 1, window_size_ms=10, retention_ms=100)
    with pytest.raises(StreamsNotStartedError):
        app.store(StoreQueryParameters.from_name_and_type("s", KV))
    app.start()
    with pytest.raises(UnknownStateStoreError):
        app.store(StoreQueryParameters.from_name_and_type("nope", KV))
    with pytest.raises(InvalidStateStoreError, match=r"\[key_value\] does not accept.*\[window\]"):
        app.store(StoreQueryParameters.from_name_and_type("w", KV))
    with pytest.raises(InvalidStateStorePartitionError, match="partition 5 .* does not exist"):
        app.store(StoreQueryParameters.from_name_and_type("s", KV).with_partition(5))
    standby = app.store(StoreQueryParameters.from_name_and_type("s", KV).with_partition(1))
    with pytest.raises(InvalidStateStorePartitionError, match="running active"):
        standby.get(key_in(1))
    stale = app.store(
        StoreQueryParameters.from_name_and_type("s", KV).with_partition(1).enable_stale_stores()
    )
    assert stale.get(key_in(1)) is None
    # A key whose partition the facade does not read here is not reported absent (Kafka's
    # facade answers null): partition 1 is only a standby here, and with_partition(0)
    # leaves it out.
    everything = app.store(StoreQueryParameters.from_name_and_type("s", KV))
    for facade in (
        everything,
        everything_but := app.store(
            StoreQueryParameters.from_name_and_type("s", KV).with_partition(0)
        ),
    ):
        with pytest.raises(InvalidStateStoreError, match="is in partition 1, which this facade"):
            facade.get(key_in(1))
    assert everything_but.get(key_in(0)) is None  # its own partition: truly absent
    with pytest.raises(ValueError, match="partition"):
        StoreQueryParameters.from_name_and_type("s", KV).with_partition(-1)
    app.close()
    with pytest.raises(StreamsStoppedError):
        standby.get("k")


def test_facade_raises_when_its_partitions_migrate(make_app: MakeApp) -> None:
    provider = StaticAssignment({HOST: Assignment({"s": {0: ACTIVE, 1: ACTIVE}})})
    app = make_app(assignment=provider)
    app.key_value_store("s", 2)
    with app:
        with app.begin_batch() as batch:
            batch.put("s", key_in(0), "v")
        store = app.store(StoreQueryParameters.from_name_and_type("s", KV))
        iterator = store.all()
        assert store.get(key_in(0)) == "v"
        provider.rebalance({OTHER: Assignment({"s": {0: ACTIVE, 1: ACTIVE}})})
        with pytest.raises(InvalidStateStoreError, match="may have migrated"):
            store.get(key_in(0))
        assert list(iterator) == [(key_in(0), "v")], "an open iterator keeps its snapshot"


def test_metadata_standalone(make_app: MakeApp) -> None:
    app = make_app(application_server="iq.example:7000")
    app.key_value_store("s", 2)
    assert app.all_metadata() == []
    assert app.query_metadata_for_key("s", "k") is KeyQueryMetadata.NOT_AVAILABLE
    with app:
        host = HostInfo("iq.example", 7000)
        [metadata] = app.all_metadata()
        assert metadata == StreamsMetadata(
            host,
            frozenset({"s"}),
            frozenset({TopicPartition("app-s-changelog", 0), TopicPartition("app-s-changelog", 1)}),
        )
        assert app.all_metadata_for_store("s") == [metadata]
        assert app.all_metadata_for_store("other") == []
        found = app.query_metadata_for_key("s", "k")
        assert found == KeyQueryMetadata(host, frozenset(), partition_for_bytes(b"k", 2))
        assert app.query_metadata_for_key("unknown", "k") is None
    with pytest.raises(StreamsStoppedError):
        app.all_metadata()


def test_metadata_across_instances(make_app: MakeApp, two_hosts: StaticAssignment) -> None:
    app = make_app(assignment=two_hosts)
    app.key_value_store("s", 2)
    with app:
        hosts = {m.host_info: m for m in app.all_metadata()}
        assert hosts[HOST].state_store_names == {"s"}
        assert hosts[HOST].standby_topic_partitions == {TopicPartition("app-s-changelog", 1)}
        metadata = app.query_metadata_for_key("s", key_in(1))
        assert metadata == KeyQueryMetadata(OTHER, frozenset({HOST}), 1)
        by_bytes = app.query_metadata_for_key("s", key_in(0), serializer=Serdes.string())
        assert by_bytes is not None and by_bytes.active_host == HOST
        custom = app.query_metadata_for_key("s", "anything", partitioner=lambda key, n: 1)
        assert custom is not None and custom.partition == 1
        with pytest.raises(ValueError, match="one partition"):
            app.query_metadata_for_key("s", "x", partitioner=lambda key, n: {0, 1})
        with pytest.raises(ValueError, match="returned 2"):
            app.query_metadata_for_key("s", "x", partitioner=lambda key, n: 2)
        with pytest.raises(ValueError, match="None"):
            app.query_metadata_for_key("s", None)
        with pytest.raises(SerializationError, match="store 's': serde int64 cannot encode"):
            app.query_metadata_for_key("s", "k", serializer=Serdes.int64())


def test_lags_from_the_changelog_and_the_provider(
    make_app: MakeApp, two_hosts: StaticAssignment
) -> None:
    changelog = InMemoryChangelog()
    app = make_app(assignment=two_hosts, changelog=changelog)
    app.key_value_store("s", 2, logging=True)
    assert app.all_local_store_partition_lags() == {}
    with app:
        with app.begin_batch() as batch:
            for i in range(5):
                batch.put("s", key_in(0), i)
        lags = app.all_local_store_partition_lags()
        assert lags["s"][0] == LagInfo(5, 5) and lags["s"][0].offset_lag == 0
        assert lags["s"][1] == LagInfo(0, 10) and lags["s"][1].offset_lag == 10
        records = changelog.records(TopicPartition("app-s-changelog", 0))
        assert [r.value for r in records] == [b"0", b"1", b"2", b"3", b"4"]
        # One store's lags, of the partitions asked that are hosted here: the same answers
        assert app.local_store_partition_lags("s") == lags["s"]
        assert app.local_store_partition_lags("s", [1]) == {1: lags["s"][1]}
        assert app.local_store_partition_lags("s", iter([1, 0, 1, 7])) == lags["s"]
        assert app.local_store_partition_lags("s", []) == {}
        with pytest.raises(UnknownStateStoreError, match="'nope'"):
            app.local_store_partition_lags("nope")


def test_a_standby_whose_end_nobody_knows_has_an_unknown_lag_never_zero(
    make_app: MakeApp,
) -> None:
    """Without a cluster nothing fills a standby, and only a `StaticAssignment`'s
    `end_offsets` say where its changelog ends: without them its lag is unknown. At lag 0
    it would answer a caller accepting any lag with absent for every key."""
    layout = StaticAssignment(
        {
            HOST: Assignment({"s": {0: ACTIVE, 1: STANDBY}}),
            OTHER: Assignment({"s": {1: ACTIVE, 0: STANDBY}}),
        }
    )
    app = make_app(assignment=layout)
    app.key_value_store("s", 2)
    with app:
        with app.begin_batch() as batch:
            batch.put("s", key_in(0), 1)
        lags = app.all_local_store_partition_lags()["s"]
        assert lags[0].offset_lag == 0, "a running active is its own end"
        assert lags[1].end_offset_position is None and lags[1].offset_lag is None
        layout.set_end_offset("s", 1, 4)
        assert app.local_store_partition_lags("s", [1])[1] == LagInfo(0, 4)


def test_rebalance_moves_promotes_and_restores(make_app: MakeApp) -> None:
    provider = StaticAssignment({HOST: Assignment({"s": {0: ACTIVE, 1: STANDBY}})})
    app = make_app(assignment=provider)
    app.key_value_store("s", 2)
    with app:
        with app.begin_batch(position={"src": {0: 1}}) as batch:
            batch.put("s", key_in(0), "v")
        provider.rebalance({HOST: Assignment({"s": {1: ACTIVE_RESTORING}})})
        assert app.roles() == {"s": {1: ACTIVE_RESTORING}}
        result = app.query(
            StateQueryRequest.in_store("s")
            .with_query(RangeQuery.with_no_bounds())
            .with_partitions({0, 1})
        )
        assert result.partition_results[0].failure_reason is FailureReason.NOT_PRESENT
        assert result.partition_results[1].is_success
        required = app.query(
            StateQueryRequest.in_store("s")
            .with_query(RangeQuery.with_no_bounds())
            .with_partitions({1})
            .require_active()
        )
        assert required.partition_results[1].failure_reason is FailureReason.NOT_ACTIVE
        provider.rebalance({HOST: Assignment({"s": {0: ACTIVE, 1: ACTIVE}})})
        assert app.roles() == {"s": {0: ACTIVE, 1: ACTIVE}}
        with app.begin_batch(position={"src": {0: 2}}) as batch:
            batch.put("s", key_in(1), "w")
        assert batch.applied == {("s", 0), ("s", 1)}
        provider.rebalance({})
        assert app.roles() == {}
        assert app.state.name == "RUNNING"


def test_static_assignment_is_validated(make_app: MakeApp) -> None:
    app = make_app(assignment=StaticAssignment({HOST: Assignment({"s": {7: ACTIVE}})}))
    app.key_value_store("s", 2)
    with pytest.raises(ValueError, match="partition 7"):
        app.start()
    assert app.state.name == "CREATED", "a start that fails validation leaves the app as it was"
    with pytest.raises(ValueError, match="only an active"):
        STANDBY.__class__(STANDBY.role, restoring=True)
