"""Batch writes: partitioning, positions on every partition, discarding, the fence."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate import (
    ACTIVE,
    STANDBY,
    Application,
    Assignment,
    HostInfo,
    InvalidStateStoreError,
    KeyQuery,
    Position,
    RangeQuery,
    SerializationError,
    StateQueryRequest,
    StaticAssignment,
    StreamsStoppedError,
    UnknownStateStoreError,
    WindowKeyQuery,
)
from iqstate.runtime import murmur2, partition_for_bytes
from iqstate.runtime.partitioner import ACCELERATED, murmur2_python

MakeApp = Callable[..., Application]
HOST = HostInfo("localhost", 7070)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("21", -973932308),
        ("foobar", -790332482),
        ("abc", 479470107),
        ("a-little-bit-long-string", -985981536),
        ("", 275646681),
    ],
)
def test_murmur2_matches_the_java_client(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected
    assert murmur2_python(text.encode()) == expected


def test_the_compiled_murmur2_is_installed_here() -> None:
    # It is a dependency on this platform; without it partitioning costs ~20x more.
    assert ACCELERATED


@given(st.binary(max_size=300))
def test_compiled_and_pure_python_murmur2_agree(data: bytes) -> None:
    assert murmur2(data) == murmur2_python(data)
    assert partition_for_bytes(data, 12) == (murmur2_python(data) & 0x7FFFFFFF) % 12


def test_partition_is_positive_murmur2_modulo() -> None:
    assert partition_for_bytes(b"abc", 7) == (479470107 & 0x7FFFFFFF) % 7
    assert partition_for_bytes(b"21", 5) == (-973932308 & 0x7FFFFFFF) % 5


def all_partitions(app: Application, store: str, query: Any) -> dict[int, Any]:
    result = app.query(StateQueryRequest.in_store(store).with_query(query))
    return result.partition_results


def test_keys_land_in_their_murmur2_partition(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 5)
    with app:
        words = [f"word-{i}" for i in range(50)]
        with app.begin_batch() as batch:
            for word in words:
                batch.put("s", word, 1)
        results = all_partitions(app, "s", RangeQuery.with_no_bounds())
        for partition, result in results.items():
            for key, _ in result.result:
                assert partition_for_bytes(key.encode(), 5) == partition


def test_custom_partitioner(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("n", 4, key_serde="int64", partitioner=lambda key, n: key % n)
    with app:
        with app.begin_batch() as batch:
            for number in range(8):
                batch.put("n", number, number)
        results = all_partitions(app, "n", RangeQuery.with_no_bounds())
        assert [k for k, _ in results[3].result] == [3, 7]


@pytest.mark.parametrize("answer", [7, -1, {0, 1}, set(), "0", None])
def test_partitioner_must_return_one_partition_in_range(make_app: MakeApp, answer: Any) -> None:
    app = make_app()
    app.key_value_store("s", 4, partitioner=lambda key, n: answer)
    with app, pytest.raises(ValueError, match="partitioner of store 's'"):
        app.begin_batch().put("s", "k", 1)


def test_every_partition_advances_to_the_batch_position(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("a", 3)
    app.key_value_store("b", 2)
    with app:
        with app.begin_batch(position={"src": {0: 41}}, batch_id=0) as batch:
            batch.put("a", "only-key", 1)
        assert len(batch.applied) == 5 and not batch.skipped
        for store in ("a", "b"):
            results = all_partitions(app, store, RangeQuery.with_no_bounds())
            assert len(results) == app.stores[store].partitions
            for result in results.values():
                assert result.position == Position.from_map({"src": {0: 41}})


def test_an_exception_in_the_block_discards_the_batch(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 2)
    with app:
        with pytest.raises(RuntimeError, match="pipeline failed"):
            with app.begin_batch(position={"src": {0: 9}}, batch_id=3) as batch:
                batch.put("s", "k", 1)
                raise RuntimeError("pipeline failed")
        assert not batch.applied
        results = all_partitions(app, "s", RangeQuery.with_no_bounds())
        assert all(
            list(r.result) == [] and r.position == Position.empty() for r in results.values()
        )
        with app.begin_batch(batch_id=3) as retry:
            retry.put("s", "k", 2)
        assert len(retry.applied) == 2, "a discarded batch id can be used again"


def test_a_batch_begun_inside_another_is_refused_and_the_outer_one_commits(
    make_app: MakeApp,
) -> None:
    """A nested batch would commit first and fence out the batch around it (its writes
    skipped): it is refused at once, and the outer batch is not harmed."""
    app = make_app()
    app.key_value_store("s", 2)
    other = make_app("other")
    other.key_value_store("s", 2)
    with app, other:
        with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as outer:
            outer.put("s", "k", 1)
            with pytest.raises(RuntimeError, match="already open in this thread"):
                with app.begin_batch(batch_id=2, allow_gaps=True) as inner:
                    inner.put("s", "k", 2)
            with other.begin_batch(batch_id=1) as elsewhere:  # another application's: fine
                elsewhere.put("s", "k", 3)
        assert len(outer.applied) == 2 and len(elsewhere.applied) == 2
        found = app.query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("k")))
        assert found.only_partition_result().result == 1  # type: ignore[union-attr]
        with app.begin_batch(batch_id=2) as following:  # once ended, the next one begins
            following.put("s", "k", 4)
        assert len(following.applied) == 2


def test_fence_skips_replayed_batches_and_reports_them(
    make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    """A replay of the last batch (a crash's) is skipped quietly; an older batch, which
    only another writer or a query with a new checkpoint sends, is skipped with a warning
    naming the partitions and their last batch."""
    app = make_app()
    app.key_value_store("s", 2)
    caplog.set_level(logging.WARNING, logger="iqstate.runtime.committer")
    with app:
        with app.begin_batch(position={"src": {0: 10}}, batch_id=5) as first:
            first.put("s", "k", "first")
        with app.begin_batch(position={"src": {0: 99}}, batch_id=5) as replay:
            replay.put("s", "k", "replayed")
        assert replay.skipped == {("s", 0), ("s", 1)} and not replay.applied
        assert not caplog.records
        with app.begin_batch(batch_id=4) as older:
            older.put("s", "k", "older")
        assert len(older.skipped) == 2
        (warning,) = caplog.records
        assert "batch 4 skipped on 's' partition 0 (last batch 5); 's' partition 1" in (
            warning.getMessage()
        )
        assert "new checkpoint" in warning.getMessage()
        [value] = [r for r in all_partitions(app, "s", KeyQuery.with_key("k")).values()]
        assert value.result == "first" and value.position == Position.from_map({"src": {0: 10}})
        with app.begin_batch(position={"src": {0: 11}}, batch_id=6) as newer:
            newer.put("s", "k", "newer")
        assert len(newer.applied) == 2


def test_batches_without_id_are_always_applied(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1)
    with app:
        with app.begin_batch(batch_id=9) as fenced:
            fenced.put("s", "k", 1)
        with app.begin_batch() as unfenced:
            unfenced.put("s", "k", 2)
        assert unfenced.applied == {("s", 0)}
        with app.begin_batch(batch_id=9) as replay:
            replay.put("s", "k", 3)
        assert replay.skipped == {("s", 0)}, "an unfenced batch keeps the fence where it was"


def test_deletes_and_window_writes(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("kv", 2)
    app.window_store("w", 2, window_size_ms=10, retention_ms=100, value_serde="int64")
    with app:
        with app.begin_batch() as batch:
            batch.put("kv", "a", 1)
            batch.put("kv", "b", 2)
            batch.put("w", "a", 5, window_start=0)
            batch.put("w", "a", 6, window_start=10)
        with app.begin_batch() as batch:
            batch.delete("kv", "a")
            batch.put("kv", "b", None)
            batch.delete("w", "a", window_start=0)
        assert all_partitions(app, "kv", KeyQuery.with_key("a")) == {} or all(
            r.result is None for r in all_partitions(app, "kv", KeyQuery.with_key("a")).values()
        )
        windows = all_partitions(
            app, "w", WindowKeyQuery.with_key_and_window_start_range("a", 0, 50)
        )
        assert [list(r.result) for r in windows.values()] == [[(10, 6)]]


def test_bad_writes_fail_at_once_and_write_nothing(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("kv", 2, key_serde="int64")
    app.window_store("w", 1, window_size_ms=10, retention_ms=100)
    with app:
        with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
            batch.put("kv", 1, "kept")
            with pytest.raises(SerializationError, match="store 'kv'.*int64.*str"):
                batch.put("kv", "not-an-int", "x")
            with pytest.raises(SerializationError, match="store 'kv'.*json.*set"):
                batch.put("kv", 2, {1, 2})
            # json's own reason is in the message, not only in the exception's cause
            with pytest.raises(SerializationError, match="float .*not JSON compliant"):
                batch.put("kv", 2, float("inf"))
            with pytest.raises(UnknownStateStoreError, match="declared stores: kv, w"):
                batch.put("nope", 1, 1)
            with pytest.raises(TypeError, match="window_start"):
                batch.put("w", "k", 1)
            with pytest.raises(TypeError, match="window_start is not allowed"):
                batch.put("kv", 3, 1, window_start=0)
            for outside in (2**63, -(2**63) - 1):  # would fail the commit, not the put
                with pytest.raises(ValueError, match="store 'w': window_start .* 64-bit"):
                    batch.put("w", "k", 1, window_start=outside)
        assert batch.applied == {("kv", 0), ("kv", 1), ("w", 0)}
        result = app.query(StateQueryRequest.in_store("kv").with_query(RangeQuery.with_no_bounds()))
        assert [pair for r in result.partition_results.values() for pair in r.result] == [
            (1, "kept")
        ]


def test_writes_to_partitions_not_active_here_are_refused(make_app: MakeApp) -> None:
    cluster = {
        HOST: Assignment({"s": {0: ACTIVE, 1: STANDBY}}),
        HostInfo("other", 7070): Assignment({"s": {1: ACTIVE, 0: STANDBY}}),
    }
    app = make_app(assignment=StaticAssignment(cluster))
    app.key_value_store("s", 2)
    with app:
        keys_for = {partition_for_bytes(f"k{i}".encode(), 2): f"k{i}" for i in range(20)}
        with (
            pytest.raises(
                InvalidStateStoreError, match="partition 1.*STANDBY.*nothing was written"
            ),
            app.begin_batch(batch_id=1) as batch,
        ):
            batch.put("s", keys_for[0], "fine")
            batch.put("s", keys_for[1], "not mine")
        result = app.query(StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds()))
        assert all(list(r.result) == [] for r in result.partition_results.values())


def test_batches_on_a_closed_application_fail(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("s", 1)
    app.start()
    app.close()
    with pytest.raises(StreamsStoppedError), app.begin_batch() as batch:
        batch.put("s", "k", 1)
    with pytest.raises(RuntimeError, match="ended"):
        batch.put("s", "k", 2)


def test_batch_arguments_are_validated(make_app: MakeApp) -> None:
    app = make_app()
    with pytest.raises(ValueError, match="batch_id"):
        app.begin_batch(batch_id=-1)
    with pytest.raises(ValueError, match="batch_id"):
        app.begin_batch(batch_id="7")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="offset"):
        app.begin_batch(position={"src": {0: "1"}})  # type: ignore[dict-item]
    # Kafka's partitions and offsets start at 0 (the HTTP API refuses a position that does not)
    with pytest.raises(ValueError, match="got 'src' partition 0 offset -5"):
        app.begin_batch(position={"src": {0: -5}})
    with pytest.raises(ValueError, match="got 'src' partition -1 offset 3"):
        app.begin_batch(position=Position.from_map({"src": {-1: 3}}))


def test_batches_limited_to_the_stores_of_one_pipeline(make_app: MakeApp) -> None:
    app = make_app()
    app.key_value_store("a", 2)
    app.key_value_store("b", 2)
    with app:
        with app.begin_batch(position={"pa": {0: 5}}, batch_id=5, stores=["a"]) as first:
            first.put("a", "k", 1)
        assert first.applied == {("a", 0), ("a", 1)}
        with app.begin_batch(position={"pb": {0: 1}}, batch_id=1, stores={"b"}) as other:
            other.put("b", "k", 2)
        assert other.applied == {("b", 0), ("b", 1)}, "b's fence is its own"
        positions = {
            name: app.query(
                StateQueryRequest.in_store(name).with_query(RangeQuery.with_no_bounds())
            ).position
            for name in ("a", "b")
        }
        assert positions == {
            "a": Position.from_map({"pa": {0: 5}}),
            "b": Position.from_map({"pb": {0: 1}}),
        }
        with pytest.raises(InvalidStateStoreError, match="not among the stores"):
            with app.begin_batch(stores=["a"]) as stray:
                stray.put("b", "k", 3)
        with pytest.raises(UnknownStateStoreError):
            app.begin_batch(stores=["nope"])


bulk_values = st.none() | st.integers(-5, 5) | st.text(max_size=3) | st.just({1, 2})
"""Values of a JSON store: `None` deletes, and a set is refused by the serde."""


@pytest.mark.parametrize("partitions", [1, 3])
@given(
    pairs=st.lists(
        st.tuples(st.text(max_size=4) | st.just(7) | st.just("\ud800"), bulk_values), max_size=12
    )
)
def test_put_all_writes_and_refuses_exactly_as_put_does(
    tmp_path_factory: pytest.TempPathFactory, partitions: int, pairs: list[tuple[Any, Any]]
) -> None:
    """The bulk path (keys and values encoded in one call each) must leave the same entries
    in the same partitions, and raise the same error after the same entries, as putting the
    pairs one by one."""
    from iqstate.runtime.batch import Batch

    app = Application("bulk", tmp_path_factory.mktemp("bulk"))
    app.key_value_store("s", partitions)
    bulk, each = Batch(app, None, None), Batch(app, None, None)
    outcomes = []
    for batch, write in (
        (bulk, lambda: bulk.put_all("s", iter(pairs))),
        (each, lambda: [each.put("s", key, value) for key, value in pairs]),
    ):
        try:
            write()
            error = None
        except SerializationError as exc:
            error = str(exc)
        outcomes.append((error, batch.pending()))
    assert outcomes[0] == outcomes[1]


def test_put_all_takes_a_mapping_and_names_an_entry_that_is_not_a_pair(tmp_path: Path) -> None:
    app = Application("bulk", tmp_path)
    app.key_value_store("s", 2, value_serde="json")
    with app:
        with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
            batch.put_all("s", {"ab": 1, "cd": [2]})  # its items, not its keys unpacked
        result = app.query(StateQueryRequest.in_store("s").with_query(RangeQuery.with_no_bounds()))
        rows = sorted(row for r in result.partition_results.values() for row in r.result)
        assert rows == [("ab", 1), ("cd", [2])]
        with pytest.raises(TypeError, match=r"store 's'.*\(key, value\) pairs.*an entry 5"):
            with app.begin_batch(position={"src": {0: 2}}, batch_id=2) as batch:
                batch.put_all("s", [("ef", 3), 5])
        ef = app.query(StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("ef")))
        assert ef.only_partition_result() is None  # the batch was not committed
