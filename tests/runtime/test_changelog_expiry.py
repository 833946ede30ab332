"""Windows and sessions a store expires are deleted from its changelog too: the active
replica logs a tombstone for each, in the batch that expired it, so a compacted changelog
holds exactly what the store holds (and a restore reads no expired window)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from iqstate import (
    Application,
    InMemoryChangelog,
    MultiVersionedKeyQuery,
    Position,
    Serdes,
    StateQueryRequest,
    TopicPartition,
    VersionedRecord,
    WindowRangeQuery,
)
from iqstate.context import StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore, MemoryWindowStore
from iqstate.keyspace import decode_window_key, encode_window_key
from iqstate.plugins import default_registry
from iqstate.runtime import ACTIVE, STANDBY
from iqstate.runtime.assignment import PartitionRole
from iqstate.runtime.committed import CommittedPartitions
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.offsets import OffsetKeeper
from iqstate.session_store import LayeredSessionStore, decode_session_key, encode_session_key
from iqstate.store import SessionStore, WindowStore
from iqstate.versioned_store import decode_version_record, encode_version_record, version_key

ENGINES = ["memory", "rocksdb", "lmdb", "sqlite"]
RETENTION = 50
MIN, MAX = -(1 << 63), (1 << 63) - 1
keys = st.sampled_from(["a", "b", "ab", "z"])
times = st.integers(0, 200)
window_puts = st.lists(st.tuples(keys, times, st.none() | st.integers(0, 9)), max_size=12)
session_puts = st.lists(
    st.tuples(keys, times, st.integers(0, 30), st.none() | st.integers(0, 9)), max_size=12
)
EXAMPLES = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def declared(directory: Path, engine: str, changelog: InMemoryChangelog) -> Application:
    app = Application("exp", directory, changelog=changelog)
    for name, declare in (("w", app.window_store), ("s", app.session_store)):
        options = {"engine": engine, "logging": True, "key_serde": "string"}
        if name == "w":
            declare(name, 2, window_size_ms=10, retention_ms=RETENTION, **options)
        else:
            declare(name, 2, RETENTION, **options)
    return app


def compacted(changelog: InMemoryChangelog, store: str) -> dict[bytes, bytes]:
    """What compaction leaves of a store's changelog: each key's last record, tombstones
    removed (markers are not the store's)."""
    last: dict[bytes, bytes | None] = {}
    for partition in changelog.partitions():
        if partition.topic == f"exp-{store}-changelog":
            for record in changelog.records(partition):
                last[record.key] = record.value
    return {key: value for key, value in last.items() if value is not None}


def held(app: Application, store: str) -> Iterator[tuple[Any, ...]]:
    """Every window or session the store answers, with its value."""
    query = (
        WindowRangeQuery.with_window_start_range(MIN, MAX)
        if store == "w"
        else WindowRangeQuery(MIN, MAX)
    )
    for result in app.query(
        StateQueryRequest.in_store(store).with_query(query)
    ).partition_results.values():
        assert result.is_success, result
        with result.result as rows:
            for windowed, value in rows:
                yield windowed.key, windowed.start_ms, windowed.end_ms, value


def logged_windows(changelog: InMemoryChangelog) -> set[tuple[Any, ...]]:
    found = set()
    for key, value in compacted(changelog, "w").items():
        window_key, start = decode_window_key(key)
        found.add((window_key.decode(), start, start + 10, int(value)))
    return found


def logged_sessions(changelog: InMemoryChangelog) -> set[tuple[Any, ...]]:
    found = set()
    for key, value in compacted(changelog, "s").items():
        session_key, start, end = decode_session_key(key)
        found.add((session_key.decode(), start, end, int(value)))
    return found


@EXAMPLES
@given(batches=st.lists(st.tuples(window_puts, session_puts), min_size=1, max_size=4))
def test_a_compacted_changelog_holds_exactly_what_the_store_holds(
    tmp_path: Path, engine: str, batches: list[tuple[list[Any], list[Any]]]
) -> None:
    shutil.rmtree(tmp_path / "app", ignore_errors=True)
    changelog = InMemoryChangelog()
    with declared(tmp_path / "app", engine, changelog) as app:
        for number, (windows, sessions) in enumerate(batches, 1):
            with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
                for key, start, value in windows:
                    batch.put("w", key, value, start)
                for key, start, length, value in sessions:
                    batch.put("s", key, value, session=(start, start + length))
            assert logged_windows(changelog) == set(held(app, "w"))
            assert logged_sessions(changelog) == set(held(app, "s"))
    with declared(tmp_path / "again", "memory", changelog) as restored:
        assert set(held(restored, "w")) == logged_windows(changelog)
        assert set(held(restored, "s")) == logged_sessions(changelog)


def test_the_batch_that_expires_a_window_logs_its_tombstone(tmp_path: Path) -> None:
    changelog = InMemoryChangelog()
    app = Application("exp", tmp_path, changelog=changelog)
    app.window_store("w", 1, window_size_ms=10, retention_ms=RETENTION, key_serde="string",
                     value_serde="string", logging=True)  # fmt: skip
    with app:
        with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
            batch.put("w", "old", "1", 0)
            batch.put("w", "kept", "2", 20)
        with app.begin_batch(position={"src": {0: 2}}, batch_id=2) as batch:
            batch.put("w", "new", "3", 60)  # stream time 60: starts at or before 10 expire
    (partition,) = changelog.partitions()
    records = [(decode_window_key(r.key), r.value) for r in changelog.records(partition)]
    assert records == [
        ((b"old", 0), b"1"),
        ((b"kept", 20), b"2"),
        ((b"new", 60), b"3"),
        ((b"old", 0), None),  # after the batch's own records
    ]


def test_the_contracts_default_scans_name_what_the_indexes_name() -> None:
    # A plugin's window or session store without an index by time inherits the contract's
    # scan; the core's stores read their index. Both must name the same windows.
    windows = MemoryWindowStore("w", 10, RETENTION)
    sessions = LayeredSessionStore(MemoryKeyValueStore("s"), RETENTION)
    for store in (windows, sessions):
        store.init(StateStoreContext(application_id="exp", store_name=store.name, partition=0))
    for key, start in ((b"a", 0), (b"b", 30), (b"a", 45)):
        windows.put(key, b"v", start)
        sessions.put(key, b"v", start, start + 5)
    for at in (40, 60, 95, 140):
        assert sorted(windows.expired_by(at)) == sorted(WindowStore.expired_by(windows, at))
        assert sorted(sessions.expired_by(at)) == sorted(SessionStore.expired_by(sessions, at))
    assert sorted(windows.expired_by(95)) == [(b"a", 0), (b"a", 45), (b"b", 30)]
    assert sorted(sessions.expired_by(95)) == [(b"a", 0, 5), (b"b", 30, 35)]


def followed(tmp_path: Path, store: str, role: PartitionRole) -> HostedPartition:
    """A followed memory partition of store `w` (windows), `s` (sessions) or `v`
    (versions) in `role`."""
    app = Application("exp", tmp_path)
    if store == "w":
        spec: Any = app.window_store("w", 1, window_size_ms=10, retention_ms=RETENTION)
    elif store == "s":
        spec = app.session_store("s", 1, RETENTION)
    else:
        spec = app.versioned_key_value_store("v", 1, RETENTION)
    context = StateStoreContext(
        application_id="exp",
        store_name=store,
        partition=0,
        changelog_partition=TopicPartition(f"exp-{store}-changelog", 0),
        query_handlers=default_registry().query_handlers,
    )
    hosted = HostedPartition(spec, 0, role, context, followed=True)
    hosted.open()
    return hosted


def record_key(store: str, key: str, start: int, length: int) -> bytes:
    if store == "w":
        return encode_window_key(key.encode(), start)
    return encode_session_key(key.encode(), start, start + length)


def replica_holds(hosted: HostedPartition, store: str) -> dict[bytes, bytes]:
    engine: Any = hosted.chain.engine
    if store == "w":
        with engine.all() as rows:
            return {encode_window_key(w.key, w.start_ms): value for w, value in rows}
    with engine.fetch_sessions(None, MIN, MAX) as rows:
        return {encode_session_key(s.key, s.start_ms, s.end_ms): value for s, value in rows}


units = st.lists(
    st.lists(st.tuples(keys, times, st.integers(0, 30), st.none() | st.integers(0, 9)))
)


@EXAMPLES
@given(store=st.sampled_from(["w", "s"]), applied=units)
def test_an_active_replica_names_what_each_unit_expired(
    tmp_path: Path, store: str, applied: list[list[Any]]
) -> None:
    # What the follower does: each unit applied, then a tombstone for each key the replica
    # named. The changelog then compacts to exactly what the replica holds.
    shutil.rmtree(tmp_path / "r", ignore_errors=True)
    hosted = followed(tmp_path / "r", store, ACTIVE)
    log: list[tuple[bytes, bytes | None]] = []
    offset = 0
    for batch_id, unit in enumerate(applied, 1):
        records = [
            (record_key(store, key, start, length), None if value is None else bytes([value]))
            for key, start, length, value in unit
        ]
        offset += len(records) + 1
        position = Position.from_map({"src": {0: batch_id}})
        expired = hosted.apply_changelog(records, batch_id, position, offset)
        log += records + [(key, None) for key in expired]
        compacted = {key: value for key, value in dict(log).items() if value is not None}
        assert compacted == replica_holds(hosted, store)
    hosted.close()


def test_a_standby_names_nothing(tmp_path: Path) -> None:
    # Only the active writes tombstones: a standby applies the same units and expires the
    # same windows, so its tombstones would only repeat the active's.
    hosted = followed(tmp_path, "w", STANDBY)
    records = [(encode_window_key(b"a", 0), b"1"), (encode_window_key(b"b", 100), b"2")]
    assert hosted.apply_changelog(records, 1, Position.from_map({"src": {0: 1}}), 3) == []
    assert replica_holds(hosted, "w") == {encode_window_key(b"b", 100): b"2"}
    hosted.close()


def versions_logged(changelog: InMemoryChangelog) -> set[tuple[str, int, int]]:
    """The value versions a compacted versioned changelog keeps (tombstone versions and
    the tombstones of expired versions left out)."""
    found = set()
    for key, value in compacted(changelog, "v").items():
        raw, timestamp, version = decode_version_record(key, value)
        if version is not None:
            found.add((raw.decode(), timestamp, Serdes.int64().deserialize(version)))
    return found


def versions_held(app: Application) -> set[tuple[str, int, int]]:
    found = set()
    for key in ("a", "b", "ab", "z"):
        query = MultiVersionedKeyQuery.with_key(key)
        result = app.query(StateQueryRequest.in_store("v").with_query(query))
        for partition_result in result.partition_results.values():
            if partition_result.is_success:
                with partition_result.result as records:
                    found.update((key, r.timestamp, r.value) for r in records)
    return found


@EXAMPLES
@given(puts=st.lists(st.tuples(keys, times, st.none() | st.integers(0, 9)), max_size=25))
def test_a_compacted_versioned_changelog_holds_the_versions_the_store_holds(
    tmp_path: Path, puts: list[tuple[str, int, int | None]]
) -> None:
    shutil.rmtree(tmp_path / "app", ignore_errors=True)
    changelog = InMemoryChangelog()
    app = Application("exp", tmp_path / "app", changelog=changelog)
    app.versioned_key_value_store("v", 2, RETENTION, key_serde="string", value_serde="int64",
                                  logging=True)  # fmt: skip
    with app:
        for number, (key, timestamp, value) in enumerate(puts, 1):
            with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
                batch.put("v", key, value, timestamp=timestamp)
            assert versions_logged(changelog) == versions_held(app)
    again = Application("exp", tmp_path / "again", changelog=changelog)
    again.versioned_key_value_store("v", 2, RETENTION, key_serde="string", value_serde="int64",
                                    logging=True)  # fmt: skip
    with again:  # restored through the tombstones of expired versions (null values)
        assert versions_held(again) == versions_logged(changelog)


def owing_k_at_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HostedPartition:
    """An active followed RocksDB partition of versioned store `v` whose first unit
    committed and expired `k@0`, but whose record of committed partitions failed after it
    (a full disk, which stays full: `CommittedPartitions.add` keeps failing)."""
    app = Application("exp", tmp_path)
    spec = app.versioned_key_value_store("v", 1, RETENTION, engine="rocksdb")
    directory = tmp_path / "exp" / "v" / "0"
    directory.mkdir(parents=True)
    context = StateStoreContext(
        application_id="exp", store_name="v", partition=0, directory=directory,
        changelog_partition=TopicPartition("exp-v-changelog", 0),
        query_handlers=default_registry().query_handlers,
    )  # fmt: skip
    committed = CommittedPartitions(tmp_path / "exp" / "v")
    hosted = HostedPartition(spec, 0, ACTIVE, context, committed, followed=True)
    hosted.open()

    def disk_full(self: CommittedPartitions, partition: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CommittedPartitions, "add", disk_full)
    first = [  # k@0 falls behind the retention once 100 is seen
        encode_version_record(b"k", 0, b"a"),
        encode_version_record(b"k", 10, b"b"),
        encode_version_record(b"other", 100, b"y"),
    ]
    with pytest.raises(OSError, match="No space"):
        hosted.apply_changelog(first, 1, Position.from_map({"s": {0: 1}}), 4)
    return hosted


def test_what_a_unit_expired_is_owed_when_the_record_after_its_commit_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record of committed partitions is written after the store commit; when it fails
    (a full disk) the commit stands and the follower reads on past the unit, so the unit's
    tombstones come with the next unit that commits (the next may fail to, on the same
    full disk): without them compaction keeps the expired versions for good, and every
    restore reads them."""
    hosted = owing_k_at_0(tmp_path, monkeypatch)
    monkeypatch.undo()
    second = [encode_version_record(b"other", 110, b"z")]
    unit = (second, 2, Position.from_map({"s": {0: 2}}), 6)
    commit = OffsetKeeper.commit

    def full_once(self: OffsetKeeper, changes: dict[TopicPartition, int | None]) -> None:
        monkeypatch.setattr(OffsetKeeper, "commit", commit)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(OffsetKeeper, "commit", full_once)  # the disk is still full
    with pytest.raises(OSError, match="No space"):
        hosted.apply_changelog(*unit)
    expired = hosted.apply_changelog(*unit)  # the follower's retry
    assert expired == [version_key(b"k", 0)], "the first unit's tombstone, owed till now"
    assert 0 in CommittedPartitions(tmp_path / "exp" / "v"), "recorded at the next commit"
    assert hosted.apply_changelog([], None, None, 7) == [], "owed once"
    hosted.close()


def test_owed_tombstones_outlast_a_spell_as_a_standby(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standby owes no tombstones of its own, and keeps the ones it owed as an active:
    they are handed over once it is an active again and a unit commits."""
    hosted = owing_k_at_0(tmp_path, monkeypatch)
    hosted.take_role(STANDBY)
    with pytest.raises(OSError, match="No space"):  # still full, as a standby
        second = [encode_version_record(b"x", 101, b"q")]
        hosted.apply_changelog(second, 2, Position.from_map({"s": {0: 2}}), 6)
    monkeypatch.undo()
    assert hosted.apply_changelog([], None, None, 7) == [], "a standby hands nothing over"
    hosted.take_role(ACTIVE)
    third = [encode_version_record(b"x", 102, b"r")]
    expired = hosted.apply_changelog(third, 3, Position.from_map({"s": {0: 3}}), 9)
    assert expired == [version_key(b"k", 0)]
    hosted.close()


def test_an_active_versioned_replica_names_the_versions_a_unit_expired(tmp_path: Path) -> None:
    hosted = followed(tmp_path, "v", ACTIVE)
    first = [
        encode_version_record(b"k", 0, b"a"),
        encode_version_record(b"k", 40, b"b"),
        encode_version_record(b"gone", 30, None),  # a tombstone version, current
    ]
    assert hosted.apply_changelog(first, 1, Position.from_map({"s": {0: 1}}), 4) == []
    second = [
        encode_version_record(b"late", 10, b"x"),  # behind the retention once 100 is seen
        encode_version_record(b"other", 100, b"y"),
        encode_version_record(b"late", 20, b"x"),
    ]
    expired = hosted.apply_changelog(second, 2, Position.from_map({"s": {0: 2}}), 8)
    assert sorted(expired) == sorted(
        [version_key(b"k", 0), version_key(b"gone", 30), version_key(b"late", 20)]
    )
    # Never a tombstone for a record key the store holds: a late put at the time of a kept
    # version (a current version is kept however old) shares its key, and so does a
    # version a unit writes again before a later record of it moves the stream time.
    third = [
        encode_version_record(b"old", 60, b"kept"),
        encode_version_record(b"again", 70, None),  # a tombstone version, current
        encode_version_record(b"other", 110, b"z"),  # history from 60 on
    ]
    assert hosted.apply_changelog(third, 3, Position.from_map({"s": {0: 3}}), 13) == []
    fourth = [  # before them, `again` is a key deleted at 70: its versions would expire
        encode_version_record(b"again", 70, b"back"),  # the same version again, a value
        encode_version_record(b"other", 300, b"w"),  # history from 250 on
        encode_version_record(b"old", 60, b"late"),  # the current version's time: dropped
    ]
    expired = hosted.apply_changelog(fourth, 4, Position.from_map({"s": {0: 4}}), 18)
    assert expired == [version_key(b"other", 100)], "not again@70 nor old@60, both held"
    engine: Any = hosted.chain.engine
    assert engine.get(b"old") == VersionedRecord(b"kept", 60, None)
    assert engine.get(b"again") == VersionedRecord(b"back", 70, None)
    hosted.close()


def a_fresh_versioned_active(tmp_path: Path) -> HostedPartition:
    """An active followed memory partition of versioned store `v`, new each example."""
    shutil.rmtree(tmp_path / "r", ignore_errors=True)
    return followed(tmp_path / "r", "v", ACTIVE)


def version_records(unit: list[tuple[str, int, int | None]]) -> list[tuple[bytes, bytes]]:
    """The changelog records of `(key, timestamp, value or None)` puts."""
    return [
        encode_version_record(key.encode(), at, None if value is None else bytes([value]))
        for key, at, value in unit
    ]


tens = st.integers(0, 20).map(lambda n: n * 10)  # times that meet the boundary exactly
version_units = st.lists(
    st.lists(st.tuples(keys, tens, st.none() | st.integers(0, 9)), min_size=1, max_size=4),
    max_size=6,
)


@EXAMPLES
@given(applied=version_units)
@example(applied=[[("a", 110, None)], [("b", 160, None)], [("a", 110, None)]])  # at the boundary
def test_late_tombstones_never_remove_a_version_the_replica_holds(
    tmp_path: Path, applied: list[list[Any]]
) -> None:
    # The follower's tombstones reach the log after the pipeline's later batches (it
    # applies a unit, then writes them; the pipeline does not wait). Whatever they land
    # after, none may be the last record of a version the replica still holds, or
    # compaction would remove it. (A late put at the time of a kept version replaces its
    # record on compaction all the same: the pipeline wrote it; docs/cluster.md.)
    hosted = a_fresh_versioned_active(tmp_path)
    engine: Any = hosted.chain.engine
    log: list[tuple[bytes, bytes | None]] = []
    late: list[bytes] = []
    offset = 0
    for batch_id, unit in enumerate(applied, 1):
        records = version_records(unit)
        offset += len(records) + 1
        position = Position.from_map({"src": {0: batch_id}})
        log += records + [(key, None) for key in late]  # the last unit's, only now
        late = hosted.apply_changelog(records, batch_id, position, offset)
        last = dict(log)
        for key in ("a", "b", "ab", "z"):
            raw = key.encode()
            held = [(v.timestamp, v.value) for v in engine.versions(raw, None, None, True)]
            latest = engine.latest_version(raw)
            for timestamp, _ in [*held, *([] if latest is None else [latest])]:
                assert last.get(version_key(raw, timestamp)) is not None, (key, timestamp)
    hosted.close()


def value_versions(log: list[tuple[bytes, bytes | None]]) -> set[tuple[bytes, int, bytes]]:
    """The value versions a compacted log of version records keeps."""
    found = set()
    for key, value in dict(log).items():
        if value is not None:
            raw, timestamp, version = decode_version_record(key, value)
            if version is not None:
                found.add((raw, timestamp, version))
    return found


def value_versions_held(engine: Any) -> set[tuple[bytes, int, bytes]]:
    return {
        (raw, v.timestamp, v.value)
        for raw in (b"a", b"b", b"ab", b"z")
        for v in engine.versions(raw, None, None, True)
    }


# Each version written once: a late put at the time of a version held replaces its record
# on compaction all the same (the pipeline wrote it; docs/cluster.md), which is not this.
distinct_units = st.lists(
    st.tuples(keys, tens, st.none() | st.integers(0, 9)), unique_by=lambda put: put[:2]
).flatmap(
    lambda puts: st.lists(st.integers(1, 4), max_size=len(puts)).map(
        lambda sizes: [puts[sum(sizes[:i]) : sum(sizes[: i + 1])] for i in range(len(sizes))]
    )
)


@EXAMPLES
@given(applied=distinct_units)
@example(applied=[[("a", 0, 1), ("a", 10, 2), ("b", 70, 3)]])  # a@0 written and expired
@example(applied=[[("a", 0, 1), ("a", 100, 2)], [("a", 10, 3), ("b", 200, 4)]])  # cut short
@example(applied=[[("a", 0, 1), ("a", 10, None), ("a", 110, 2)], [("a", 90, 3), ("b", 120, 4)]])
@example(applied=[[("a", 150, None), ("b", 100, None)], [("a", 200, None)]])  # deleted at 100
def test_versions_a_unit_writes_or_cuts_short_and_expires_leave_the_changelog(
    tmp_path: Path, applied: list[list[Any]]
) -> None:
    # A unit that spans more than the retention (a replica catching up applies many
    # batches at once) can write a version, or cut a held one short with an out-of-order
    # one, and expire it in the same go: the store never held it expired beforehand, yet
    # its record must leave the changelog as well.
    hosted = a_fresh_versioned_active(tmp_path)
    engine: Any = hosted.chain.engine
    log: list[tuple[bytes, bytes | None]] = []
    offset = 0
    for batch_id, unit in enumerate(applied, 1):
        records = version_records(unit)
        offset += len(records) + 1
        position = Position.from_map({"src": {0: batch_id}})
        expired = hosted.apply_changelog(records, batch_id, position, offset)
        log += records + [(key, None) for key in expired]
        assert value_versions(log) == value_versions_held(engine)
        # every record, tombstone versions too: exactly the versions the store holds
        held = {version_key(k, at) for k in (b"a", b"b", b"ab", b"z") for at in
                engine.held_timestamps(k)}  # fmt: skip
        assert {key for key, value in dict(log).items() if value is not None} == held
    hosted.close()


@EXAMPLES
@given(applied=version_units)
@example(applied=[[("a", 0, 1), ("a", 10, 2), ("b", 70, 3)]])
@example(applied=[[("a", 0, 1), ("a", 100, 2)], [("a", 10, 3), ("b", 200, 4)]])
def test_a_batch_logs_tombstones_for_the_versions_it_writes_or_cuts_short_and_expires(
    tmp_path: Path, applied: list[list[Any]]
) -> None:
    # The same in embedded mode, where the change-logging layer writes the changelog.
    shutil.rmtree(tmp_path / "app", ignore_errors=True)
    changelog = InMemoryChangelog()
    app = Application("exp", tmp_path / "app", changelog=changelog)
    app.versioned_key_value_store("v", 1, RETENTION, key_serde="string", value_serde="int64",
                                  logging=True)  # fmt: skip
    with app:
        for number, unit in enumerate(applied, 1):
            with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
                for key, timestamp, value in unit:
                    batch.put("v", key, value, timestamp=timestamp)
            assert versions_logged(changelog) == versions_held(app)


def test_a_put_all_that_fails_partway_still_drops_what_its_puts_expired() -> None:
    # The stores drop expired entries once per put_all; a put that raises partway must not
    # leave what the earlier puts expired in place (it would show in fetches).
    sessions = LayeredSessionStore(MemoryKeyValueStore("s"), RETENTION)
    sessions.init(StateStoreContext(application_id="exp", store_name="s", partition=0))
    sessions.put(b"a", b"v", 0, 5)
    with pytest.raises(ValueError):
        sessions.put_all([(b"b", 100, 105, b"v"), (b"c", 10, 5, b"v")])  # ends before start
    with sessions.fetch_sessions(None, MIN, MAX) as held:
        assert [(w.key, w.start_ms, w.end_ms) for w, _ in held] == [(b"b", 100, 105)]
