"""The store types of SPEC 6.1 through the Application: typed keys and values, batches,
partitions, positions, the change-logging layer and a restore from the changelog, each
query type checked against a plain model on every engine."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from iqstate import (
    Application,
    FailureReason,
    InMemoryChangelog,
    KeyQuery,
    MultiVersionedKeyQuery,
    Position,
    PositionBound,
    RangeQuery,
    StateQueryRequest,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    ValueAndTimestamp,
    VersionedKeyQuery,
    VersionedRangeQuery,
    VersionedRecord,
    Windowed,
    WindowKeyQuery,
    WindowRangeQuery,
)
from iqstate.testing.type_models import SessionModel, VersionedModel

ENGINES = ["memory", "rocksdb", "lmdb", "sqlite"]
RETENTION = 50
keys = st.sampled_from(["a", "b", "c", "ab", "zz", "m"])
times = st.integers(0, 120)
EXAMPLES = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def ask(app: Application, store: str, query: Any, **options: Any) -> list[Any]:
    """Every partition's successful answer, as a list (iterators read and closed)."""
    request = StateQueryRequest.in_store(store).with_query(query)
    if "bound" in options:
        request = request.with_position_bound(options["bound"])
    answers = []
    for partition, result in sorted(app.query(request).partition_results.items()):
        assert result.is_success, (partition, result)
        value = result.result
        if hasattr(value, "__iter__") and not isinstance(value, str | bytes):
            with value as rows:
                answers.extend(rows)
        elif value is not None:
            answers.append(value)
    return answers


class Partitioned:
    """One model per store partition: each partition has its own stream time, so
    retention counts back from the newest time of that partition (as in Kafka, per task)."""

    def __init__(self, app: Application, store: str, model: type[Any]) -> None:
        self.app, self.store, self.model = app, store, model
        self.models: dict[int, Any] = {}

    def of(self, key: str) -> Any:
        partition = self.app.query_metadata_for_key(self.store, key).partition
        if partition not in self.models:
            self.models[partition] = self.model(RETENTION)
        return self.models[partition]


def declared(
    tmp_path: Path, engine: str, changelog: InMemoryChangelog | None = None
) -> Application:
    app = Application("types", tmp_path / "app", changelog=changelog)
    logging = changelog is not None
    app.timestamped_key_value_store("t", 3, engine=engine, logging=logging)
    app.versioned_key_value_store("v", 3, RETENTION, engine=engine, logging=logging)
    app.session_store("s", 3, RETENTION, engine=engine, logging=logging)
    app.global_key_value_store("g", engine=engine, logging=logging)
    return app


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    """The test's directory, emptied before each hypothesis example (`_empty`)."""
    return tmp_path


def _empty(path: Path) -> Path:
    shutil.rmtree(path / "app", ignore_errors=True)
    return path


versioned_ops = st.lists(st.tuples(keys, st.none() | st.integers(0, 9), times), max_size=30)


@EXAMPLES
@given(batches=st.lists(versioned_ops, min_size=1, max_size=3), at=times)
def test_versioned_queries_match_the_model(
    fresh: Path, engine: str, batches: list[list[tuple[str, int | None, int]]], at: int
) -> None:
    with declared(_empty(fresh), engine) as app:
        models = Partitioned(app, "v", VersionedModel)
        for number, batch in enumerate(batches):
            with app.begin_batch(position={"src": {0: number}}, batch_id=number) as writes:
                for key, value, timestamp in batch:
                    writes.put("v", key, value, timestamp=timestamp)
                    raw_value = None if value is None else str(value).encode()
                    models.of(key).put(key.encode(), raw_value, timestamp)
        for key in ["a", "b", "ab", "zz"]:
            raw, model = key.encode(), models.of(key)
            for as_of in (None, at):
                expected = model.get(raw, as_of)
                found = ask(app, "v", VersionedKeyQuery(key, as_of))
                assert found == ([] if expected is None else [_typed(expected)])
            latest = model.get(raw)
            assert ask(app, "v", KeyQuery.with_key(key)) == (
                [] if latest is None else [int(latest.value)]
            )
            assert ask(app, "v", MultiVersionedKeyQuery.with_key(key).to_time(at)) == [
                _typed(record) for record in model.versions_of(raw, None, at, False)
            ]
        in_range = sorted(
            ask(app, "v", VersionedRangeQuery.with_range("a", "m").as_of(at)), key=lambda p: p[0]
        )
        assert in_range == sorted(
            (key.decode(), _typed(record))
            for model in models.models.values()
            for key, record in model.range_as_of(b"a", b"m", at)
        )


def _typed(record: VersionedRecord[bytes]) -> VersionedRecord[int]:
    return VersionedRecord(int(record.value), record.timestamp, record.valid_to)


@EXAMPLES
@given(
    puts=st.lists(st.tuples(keys, st.none() | st.integers(0, 9), times), min_size=1, max_size=30)
)
def test_timestamped_queries_match_the_model(
    fresh: Path, engine: str, puts: list[tuple[str, int | None, int]]
) -> None:
    model: dict[str, ValueAndTimestamp[int]] = {}
    with declared(_empty(fresh), engine) as app:
        with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as writes:
            for key, value, timestamp in puts:
                writes.put("t", key, value, timestamp=timestamp)
                if value is None:
                    model.pop(key, None)
                else:  # a later put overwrites, whatever its timestamp (as in Kafka)
                    model[key] = ValueAndTimestamp(value, timestamp)
        for key in ["a", "b", "zz"]:
            stamped = model.get(key)
            assert ask(app, "t", TimestampedKeyQuery.with_key(key)) == (
                [] if stamped is None else [stamped]
            )
            assert ask(app, "t", KeyQuery.with_key(key)) == (
                [] if stamped is None else [stamped.value]
            )
        everything = sorted(ask(app, "t", TimestampedRangeQuery.with_no_bounds()))
        assert everything == sorted(model.items())
        plain = sorted(ask(app, "t", RangeQuery.with_range("a", "b")))
        assert plain == sorted((k, v.value) for k, v in model.items() if "a" <= k <= "b")


session_ops = st.lists(
    st.tuples(keys, st.none() | st.integers(0, 9), times, st.integers(0, 15)), max_size=30
)


@EXAMPLES
@given(ops=session_ops)
def test_session_queries_match_the_model(
    fresh: Path, engine: str, ops: list[tuple[str, int | None, int, int]]
) -> None:
    with declared(_empty(fresh), engine) as app:
        models = Partitioned(app, "s", SessionModel)
        with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as writes:
            for key, value, start, length in ops:
                writes.put("s", key, value, session=(start, start + length))
                raw_value = None if value is None else str(value).encode()
                models.of(key).put(key.encode(), raw_value, start, start + length)
        for key in ["a", "ab", "m"]:
            assert ask(app, "s", WindowRangeQuery.with_key(key)) == [
                (Windowed(key, w.start_ms, w.end_ms), int(v))
                for w, v in models.of(key).fetch(key.encode(), -(1 << 63), (1 << 63) - 1)
            ]
        every = sorted(ask(app, "s", WindowRangeQuery.with_window_start_range(0, 60)))
        assert every == sorted(
            (Windowed(w.key.decode(), w.start_ms, w.end_ms), int(v))
            for model in models.models.values()
            for w, v in model.fetch(None, 0, 60)
        )


def test_a_restore_from_the_changelog_answers_the_same_history(tmp_path: Path) -> None:
    """Memory stores with a changelog: a new process restores every type from it and
    answers exactly what the first one did."""
    changelog = InMemoryChangelog()
    queries = [
        ("v", MultiVersionedKeyQuery.with_key("k").with_ascending_timestamps()),
        ("v", VersionedKeyQuery.with_key("k").as_of(15)),
        ("v", VersionedRangeQuery.with_no_bounds().as_of(25)),
        ("t", TimestampedRangeQuery.with_no_bounds()),
        ("s", WindowRangeQuery.with_key("k")),
        ("g", KeyQuery.with_key("k")),
    ]
    with declared(tmp_path, "memory", changelog) as app:
        with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as writes:
            writes.put("v", "k", 1, timestamp=10)
            writes.put("v", "k", 3, timestamp=30)
            writes.put("v", "k", 2, timestamp=20)  # out of order
            writes.delete("v", "j", timestamp=5)
            writes.put("v", "j", 9, timestamp=22)
            writes.put("t", "k", 1, timestamp=100)
            writes.put("s", "k", 1, session=(0, 10))
            writes.put("s", "k", 2, session=(20, 30))
            writes.delete("s", "k", session=(0, 10))
            writes.put("g", "k", "global")
        before = [ask(app, store, query) for store, query in queries]
    with declared(tmp_path, "memory", changelog) as app:
        assert [ask(app, store, query) for store, query in queries] == before
        assert before[0] == [VersionedRecord(1, 10, 20), VersionedRecord(2, 20, 30),
                             VersionedRecord(3, 30, None)]  # fmt: skip
        assert before[4] == [(Windowed("k", 20, 30), 2)]
        bound = PositionBound.at(Position.from_map({"src": {0: 1}}))
        assert ask(app, "v", VersionedKeyQuery.with_key("k"), bound=bound) == [
            VersionedRecord(3, 30, None)
        ], "the restored replica is at the batch's position"


def test_a_put_without_what_its_store_needs_is_refused(tmp_path: Path) -> None:
    with declared(tmp_path, "memory") as app:
        with pytest.raises(TypeError, match="'v'.*timestamp=<ms>"):
            with app.begin_batch() as writes:
                writes.put("v", "k", 1)
        with pytest.raises(TypeError, match="'s'.*session=\\(start_ms, end_ms\\)"):
            with app.begin_batch() as writes:
                writes.put("s", "k", 1)
        with pytest.raises(TypeError, match="'v': a put or delete .* needs timestamp=<ms>"):
            with app.begin_batch() as writes:
                writes.delete("v", "k")  # a delete is a tombstone version: it needs its time
        with pytest.raises(TypeError, match="'s' is a session store: put and delete need session"):
            with app.begin_batch() as writes:
                writes.delete("s", "k")
        with pytest.raises(TypeError, match="'s' is a session store: timestamp is not allowed"):
            with app.begin_batch() as writes:
                writes.put("s", "k", 1, timestamp=4, session=(1, 2))
        with pytest.raises(TypeError, match="timestamp is not allowed"):
            with app.begin_batch() as writes:
                writes.put("g", "k", 1, timestamp=4)
        with pytest.raises(ValueError, match="after its end"):
            with app.begin_batch() as writes:
                writes.put("s", "k", 1, session=(9, 3))
        with pytest.raises(TypeError, match=r"put_all takes \(key, value, timestamp\) entries"):
            with app.begin_batch() as writes:
                writes.put_all("t", [("k", 1)])
        with pytest.raises(TypeError, match="or \\(key, value, time\\) entries; use put"):
            with app.begin_batch() as writes:
                writes.put_all("v", {"k": 1})
        with app.begin_batch() as writes:  # a malformed entry: nothing of the call is put
            with pytest.raises(TypeError, match="got \\('y',\\); nothing of this call"):
                writes.put_all("t", [("x", 1, 1), ("y",)])
            assert writes.pending() == {}
        assert ask(app, "v", KeyQuery.with_key("k")) == [], "nothing of a refused batch lands"


def test_put_all_writes_timed_entries_as_put_does(tmp_path: Path, engine: str) -> None:
    with declared(tmp_path, engine) as app:
        with app.begin_batch() as batch:
            batch.put_all("t", [("a", 1, 10), ("b", 2, 20)])
            batch.put_all("v", [("a", "old", 5), ("a", "new", 15), ("b", None, 3)])
            batch.put_all("s", [("a", 7, (1, 4)), ("a", 8, (10, 12))])
        assert sorted(ask(app, "t", TimestampedRangeQuery.with_no_bounds())) == [
            ("a", ValueAndTimestamp(1, 10)),
            ("b", ValueAndTimestamp(2, 20)),
        ]
        assert ask(app, "v", VersionedKeyQuery.with_key("a").as_of(9)) == [
            VersionedRecord("old", 5, 15)
        ]
        assert ask(app, "v", VersionedKeyQuery.with_key("b")) == []  # a tombstone version
        assert ask(app, "s", WindowRangeQuery.with_key("a")) == [
            (Windowed("a", 1, 4), 7),
            (Windowed("a", 10, 12), 8),
        ]


def test_window_range_with_a_key_on_a_window_store(tmp_path: Path) -> None:
    """`WindowRangeQuery.with_key` asks a window store for one key's windows too."""
    app = Application("windows", tmp_path / "app")
    app.window_store("w", 2, 10, 1_000, value_serde="int64")
    with app:
        with app.begin_batch() as batch:
            batch.put("w", "a", 1, window_start=0)
            batch.put_all_windows("w", [("a", 20, 2), ("b", 10, 3)])
        assert ask(app, "w", WindowRangeQuery.with_key("a")) == [
            (Windowed("a", 0, 10), 1),
            (Windowed("a", 20, 30), 2),
        ]
        assert ask(app, "w", WindowRangeQuery.with_key("b")) == [(Windowed("b", 10, 20), 3)]


def test_a_query_no_layer_answers_names_the_store_and_what_its_layers_answer(
    tmp_path: Path,
) -> None:
    """UNKNOWN_QUERY_TYPE names the store as declared and the query types any of its layers
    answers: a timestamped store's come from its top layer, not from the engine beneath."""
    app = Application("unknown", tmp_path / "app")
    app.timestamped_key_value_store("prices", 1, value_serde="float64")
    with app:
        request = StateQueryRequest.in_store("prices").with_query(
            WindowKeyQuery.with_key_and_window_start_range("a", 0, 1)
        )
        failed = app.query(request).partition_results[0]
        assert failed.failure_reason is FailureReason.UNKNOWN_QUERY_TYPE
        assert (
            "(metered.timestamped_key_value store 'prices' over memory.key_value)"
            in failed.failure_message
        )
        assert "TimestampedKeyQuery" in failed.failure_message
        assert "TimestampedRangeQuery" in failed.failure_message
        assert failed.position == Position.empty()


def test_a_window_ending_past_the_latest_time_ends_at_it(tmp_path: Path, engine: str) -> None:
    """As Kafka's window key schema does, a window whose end would overflow a long ends at
    `Long.MAX_VALUE`, in every answer and announcement that names it."""
    latest = (1 << 63) - 1
    app = Application("windows", tmp_path / "app")
    app.window_store("w", 1, 1_000, 1_000, value_serde="int64", engine=engine)
    with app:
        subscription = app.subscribe("w")
        assert next(subscription).snapshot
        with app.begin_batch() as batch:
            batch.put("w", "k", 1, window_start=latest - 10)
        window = Windowed("k", latest - 10, latest)
        everything = WindowRangeQuery.with_window_start_range(-(1 << 63), latest)
        assert ask(app, "w", everything) == [(window, 1)]
        assert ask(app, "w", WindowRangeQuery.with_key("k")) == [(window, 1)]
        assert [change.window for change in next(subscription).changes] == [(latest - 10, latest)]


def test_windows_at_the_latest_start_are_all_found_whatever_their_keys(
    tmp_path: Path, engine: str
) -> None:
    """Windows starting at `Long.MAX_VALUE` under the keys 0xff and 0xff 0x01 (bytes keys,
    or large int64 keys, begin with 0xff): a scan of every key's windows found the first
    only on the engines that index windows by start, the bound of that index ending below
    the second's entry."""
    latest = (1 << 63) - 1
    app = Application("windows", tmp_path / "app")
    app.window_store("w", 1, 10, 100, key_serde="bytes", value_serde="string", engine=engine)
    with app:
        with app.begin_batch() as batch:
            batch.put("w", b"\xff\x01", "longer", window_start=latest)
            batch.put("w", b"\xff", "short", window_start=latest)
        everything = WindowRangeQuery.with_window_start_range(0, latest)
        assert ask(app, "w", everything) == [
            (Windowed(b"\xff", latest, latest), "short"),
            (Windowed(b"\xff\x01", latest, latest), "longer"),
        ]


def test_a_put_the_versioned_store_drops_is_not_logged(tmp_path: Path) -> None:
    """A put older than the retention is dropped, and not logged either: logged under the
    kept version's key and time, compaction could keep it instead, and a replica restoring
    would drop it again, losing the kept version."""
    changelog = InMemoryChangelog()
    app = Application("dropped", tmp_path / "app", changelog=changelog)
    app.versioned_key_value_store("v", 1, 100, logging=True, value_serde="string")
    with app:
        with app.begin_batch() as batch:
            batch.put("v", "k", "kept", timestamp=10)
            batch.put("v", "z", "later", timestamp=1_000)  # the retention starts at 900 now
            batch.put("v", "k", "late", timestamp=10)  # dropped
        (partition,) = changelog.partitions()
        records = [r for r in changelog.records(partition) if r.key.startswith(b"k")]
        assert [record.value for record in records] == [b"\x01kept"], "only the kept version"
        assert ask(app, "v", VersionedKeyQuery.with_key("k")) == [VersionedRecord("kept", 10, None)]


def test_times_outside_64_bits_are_refused_naming_the_store(tmp_path: Path) -> None:
    with declared(tmp_path, "memory") as app:
        with pytest.raises(ValueError, match="store 'v': the timestamp of a put .* outside"):
            with app.begin_batch() as batch:
                batch.put("v", "k", 1, timestamp=1 << 70)
        with pytest.raises(ValueError, match="store 's': a session's end .* outside"):
            with app.begin_batch() as batch:
                batch.put("s", "k", 1, session=(0, 1 << 63))


def test_an_as_of_instant_outside_64_bits_or_none_is_refused_clearly(
    tmp_path: Path, engine: str
) -> None:
    """Stores keep times as signed 64-bit ms: an instant beyond them is refused where the
    query is built (it used to fail inside the store as a STORE_EXCEPTION, and only with
    the compiled speedups), and `as_of(None)` is refused as Kafka refuses a null `asOf`."""
    for outside in (1 << 63, -(1 << 63) - 1):
        with pytest.raises(ValueError, match="VersionedKeyQuery: as_of .* signed 64-bit"):
            VersionedKeyQuery.with_key("k").as_of(outside)
        with pytest.raises(ValueError, match="VersionedRangeQuery: as_of .* signed 64-bit"):
            VersionedRangeQuery.with_no_bounds().as_of(outside)
    with pytest.raises(ValueError, match="VersionedKeyQuery.as_of: .* must not be None"):
        VersionedKeyQuery.with_key("k").as_of(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="VersionedRangeQuery.as_of: .* must not be None"):
        VersionedRangeQuery.with_no_bounds().as_of(None)  # type: ignore[arg-type]
    with declared(tmp_path, engine) as app:
        with app.begin_batch() as batch:
            batch.put("v", "k", 1, timestamp=5)
        latest = (1 << 63) - 1
        assert ask(app, "v", VersionedKeyQuery.with_key("k").as_of(latest)) == [
            VersionedRecord(1, 5, None)
        ]
        assert ask(app, "v", VersionedKeyQuery.with_key("k").as_of(-(1 << 63))) == []
