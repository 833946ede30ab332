"""The LMDB engine: conformance, crashes, map growth, locking, damage, migration, fsync,
options, and its versioned store's as-of ranges read in place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest
from iqstate_lmdb import LMDB_ENGINE, LMDBKeySizeError, LMDBKeyValueStore
from iqstate_lmdb.versioned import LMDBVersionedStore
from support.engine_stores import opened

from iqstate import (
    Application,
    ClosedStoreError,
    CorruptStateError,
    KeyQuery,
    Position,
    RangeQuery,
    StateDirectoryLockedError,
    StateQueryRequest,
    StateStorageError,
    TopicPartition,
)
from iqstate.codec import encode_offset, encode_position, offset_key
from iqstate.context import ProcessingGuarantee
from iqstate.runtime.offsets import CHECKPOINT_FILE, POSITION_FILE, write_offsets_file
from iqstate.store import StateStore
from iqstate.testing import StoreConformance, StoreFactory, make_context
from iqstate.versioned_store import LayeredVersionedStore

TP = TopicPartition("app-s-changelog", 0)


class TestLMDBConformance(StoreConformance):
    persistent = True
    manages_offsets = True
    window = True

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        return StoreFactory.for_engine(LMDB_ENGINE)

    def simulate_crash(self, store: StateStore) -> None:
        assert isinstance(store, LMDBKeyValueStore)
        store.abandon()


def open_store(
    root: Path,
    guarantee: ProcessingGuarantee = "exactly_once",
    *,
    sync: bool = False,
    **config: object,
) -> LMDBKeyValueStore:
    return opened(LMDBKeyValueStore("s"), root, guarantee, sync=sync, **config)


def data_file(root: Path) -> Path:
    return root / "s" / "0" / "lmdb" / "data.mdb"


def filled(root: Path, keys: int = 20_000) -> None:
    """A closed store with `keys` keys of 100 bytes, written in one commit at offset 7."""
    store = open_store(root)
    store.put_all([(b"key-%06d" % i, b"%100d" % i) for i in range(keys)])
    store.commit({TP: 7})
    store.close()


READER = """
import json, sys
from pathlib import Path
from typing import Any
from iqstate_lmdb import LMDBKeyValueStore
from iqstate.dispatch import QueryHandlerRegistry
from iqstate.testing import make_context
outcome = {"errors": [], "wrong": 0, "right": 0}
store = LMDBKeyValueStore("s")
try:
    store.init(make_context(Path(sys.argv[1]), "s", query_handlers=QueryHandlerRegistry()))
except Exception as error:
    outcome["errors"].append([type(error).__name__, str(error)])
else:
    for read in (lambda: list(store.all()), lambda: list(store.reverse_all())):
        try:
            read()
        except Exception as error:
            outcome["errors"].append([type(error).__name__, str(error)])
    for i in range(int(sys.argv[2])):
        try:
            value = store.get(b"key-%06d" % i)
        except Exception as error:
            outcome["errors"].append([type(error).__name__, str(error)])
        else:
            outcome["right" if value == b"%100d" % i else "wrong"] += 1
print(json.dumps(outcome))
"""


def read_in_a_child(root: Path, keys: int) -> dict[str, object]:
    """Open the store and read everything in another process: a bus error kills only it."""
    child = subprocess.run(
        [sys.executable, "-c", READER, str(root), str(keys)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, f"the reader died ({child.returncode}): {child.stderr[-2000:]}"
    outcome: dict[str, object] = json.loads(child.stdout)
    return outcome


def test_map_grows_instead_of_failing(tmp_path: Path) -> None:
    store = open_store(tmp_path, initial_map_mb=1)
    before = store.map_size()
    for batch in range(8):
        # A read before each commit leaves a reused read transaction open; the map must
        # still grow (LMDB resizes only with no transaction open).
        assert store.get(b"%d-0" % (batch - 1)) == (b"x" * 1000 if batch else None)
        store.put_all([(b"%d-%d" % (batch, i), b"x" * 1000) for i in range(1000)])
        store.commit({TP: batch})
    assert store.map_size() > before
    assert store.approximate_num_entries() == 8000
    store.close()
    reopened = open_store(tmp_path)
    assert reopened.get(b"7-999") == b"x" * 1000 and reopened.committed_offset(TP) == 7
    reopened.close()


def test_reads_see_each_commit_and_threads_read_alongside(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    seen: list[int] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            value = store.get(b"counter")
            seen.append(-1 if value is None else int(value))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for number in range(300):
            store.put(b"counter", b"%d" % number)
            store.commit({TP: number})
            assert store.get(b"counter") == b"%d" % number, "a read after a commit sees it"
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert set(seen) <= set(range(-1, 300)), "every read saw a committed value"
    assert store.get(b"counter") == b"299"
    store.close()


def test_a_crash_leaves_the_last_commit_under_either_guarantee_and_locking(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path)
    with pytest.raises(StateDirectoryLockedError):
        open_store(tmp_path)
    store.put(b"k", b"v")
    store.commit({TP: 1})
    store.put(b"uncommitted", b"x")
    store.abandon()
    for guarantee in ("exactly_once", "at_least_once"):
        reopened = open_store(tmp_path, guarantee)
        assert reopened.get(b"k") == b"v" and reopened.committed_offset(TP) == 1
        assert reopened.get(b"uncommitted") is None
        reopened.abandon()


def test_a_truncated_data_file_is_refused_at_open_instead_of_killing_the_process(
    tmp_path: Path,
) -> None:
    filled(tmp_path)
    os.truncate(data_file(tmp_path), data_file(tmp_path).stat().st_size // 2)
    outcome = read_in_a_child(tmp_path, 20_000)
    assert outcome["right"] == outcome["wrong"] == 0
    [(kind, message)] = outcome["errors"]  # type: ignore[misc]
    assert kind == "CorruptStateError" and "truncated" in message
    assert str(data_file(tmp_path).parent) in message


@pytest.mark.parametrize("damage", ["empty", "deleted"])
def test_an_empty_or_deleted_data_file_does_not_open_as_an_empty_store(
    tmp_path: Path, damage: str
) -> None:
    filled(tmp_path, 100)
    if damage == "empty":
        os.truncate(data_file(tmp_path), 0)
    else:
        data_file(tmp_path).unlink()
    with pytest.raises(CorruptStateError, match="data.mdb"):
        open_store(tmp_path)


def test_damaged_pages_are_corrupt_state_naming_the_environment(tmp_path: Path) -> None:
    """LMDB's own errors (MDB_CORRUPTED, MDB_PAGE_NOTFOUND, a dead transaction after them)
    come out as `CorruptStateError` naming the environment, at open and at each read."""
    filled(tmp_path)
    path = data_file(tmp_path)
    page = 4096
    pages = path.stat().st_size // page
    with path.open("r+b") as handle:
        for number in range(pages // 2, pages // 2 + 3):  # leaf pages: flags, bounds garbage
            handle.seek(number * page + 10)
            handle.write(b"\xff" * 6)
    outcome = read_in_a_child(tmp_path, 20_000)
    assert outcome["wrong"] == 0 and outcome["right"] > 0, "undamaged pages still answer"
    errors = outcome["errors"]
    assert errors and all(kind == "CorruptStateError" for kind, _ in errors)  # type: ignore[union-attr]
    assert all(str(path.parent) in message for _, message in errors)  # type: ignore[union-attr]
    assert outcome["right"] + len(errors) == 20_000 + 2  # type: ignore[operator]


def test_commits_are_fsynced_when_the_runtime_asks_unless_the_store_says_otherwise(
    tmp_path: Path,
) -> None:
    cases = [(True, {}, True), (False, {}, False), (True, {"sync_commits": False}, False)]
    cases.append((False, {"sync_commits": True}, True))
    for runtime_asks, config, syncs in cases:
        store = open_store(tmp_path, sync=runtime_asks, **config)
        assert store.syncs_commits is syncs
        store.put(b"k", b"v")
        store.commit({TP: 1})
        store.close()


def test_legacy_files_are_migrated(tmp_path: Path) -> None:
    directory = tmp_path / "s" / "0"
    directory.mkdir(parents=True)
    write_offsets_file(directory / CHECKPOINT_FILE, {TP: 5})
    write_offsets_file(directory / POSITION_FILE, {TopicPartition("src", 1): 2})
    store = open_store(tmp_path)
    assert store.committed_offset(TP) == 5 and store.position == Position.from_map({"src": {1: 2}})
    assert not (directory / CHECKPOINT_FILE).exists()
    store.close()


def test_options_are_validated_when_the_store_is_declared(tmp_path: Path) -> None:
    app = Application("app", tmp_path)
    with pytest.raises(ValueError, match="unknown lmdb option.*map_mb"):
        app.key_value_store("a", 1, engine="lmdb", config={"map_mb": 5})
    with pytest.raises(ValueError, match="max_readers"):
        app.key_value_store("b", 1, engine="lmdb", config={"max_readers": 0})
    with pytest.raises(ValueError, match="sync_commits"):
        app.key_value_store("c", 1, engine="lmdb", config={"sync_commits": 1})


def test_a_damaged_value_is_refused_not_served(tmp_path: Path) -> None:
    """LMDB keeps no checksums: a value whose bytes changed on disk was served as it was."""
    filled(tmp_path, 2000)
    path = data_file(tmp_path)
    content = path.read_bytes()
    at = content.index(b"%100d" % 1234) + 99  # the last digit of key 1234's value
    with path.open("r+b") as handle:
        handle.seek(at)
        handle.write(b"5")  # now it reads as key 1235's value
    store = open_store(tmp_path)
    try:
        with pytest.raises(CorruptStateError, match="damaged record"):
            store.get(b"key-001234")
        with pytest.raises(CorruptStateError, match="damaged record"):
            list(store.range(b"key-001200", b"key-001300"))
        with pytest.raises(CorruptStateError, match="damaged record"):
            list(store.reverse_range(b"key-001200", b"key-001300"))
        assert store.get(b"key-001235") == b"%100d" % 1235
        # ranges that stop short of the damaged record, from either side, are served
        below = [b"key-%06d" % i for i in range(1200, 1234)]
        assert [key for key, _ in store.range(b"key-001200", b"key-001233")] == below
        assert [key for key, _ in store.reverse_range(b"key-001200", b"key-001233")] == below[::-1]
        assert len(list(store.reverse_range(b"key-001235", None))) == 2000 - 1235
    finally:
        store.close()


def test_a_range_whose_damaged_record_was_replaced_meanwhile_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first read of a range found a damaged record; a commit replaced it before the
    re-read that names it: the range is answered as it now is, every record checked."""
    import iqstate_lmdb.store

    filled(tmp_path, 200)
    store = open_store(tmp_path)
    try:
        first_reads: list[bool] = []

        def damaged_at_first(
            records: object, upper: bytes | None, inclusive: bool
        ) -> list[tuple[bytes, bytes]] | None:
            first_reads.append(True)
            return None  # what the checked read answers when a checksum fails

        monkeypatch.setattr(iqstate_lmdb.store, "unseal_below", damaged_at_first)
        pairs = list(store.range(b"key-000010", b"key-000019"))
        assert first_reads == [True]
        assert pairs == [(b"key-%06d" % i, b"%100d" % i) for i in range(10, 20)]
    finally:
        store.close()


def test_a_store_written_before_checksums_is_sealed_when_first_opened(tmp_path: Path) -> None:
    path = tmp_path / "s" / "0" / "lmdb"
    path.mkdir(parents=True)
    env = lmdb.open(str(path), max_dbs=2)
    data, offsets = env.open_db(b"data"), env.open_db(b"offsets")
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v", db=data)
        txn.put(b"status", b"\x00", db=offsets)
        txn.put(b"position", encode_position(Position.from_map({"src": {0: 3}})), db=offsets)
        txn.put(offset_key(TP), encode_offset(7), db=offsets)
    env.close()
    for _ in range(2):
        store = open_store(tmp_path)
        assert store.get(b"k") == b"v" and store.committed_offset(TP) == 7
        assert store.position == Position.from_map({"src": {0: 3}})
        store.close()


def test_a_lost_format_marker_is_refused_not_sealed_twice(tmp_path: Path) -> None:
    filled(tmp_path, 10)
    env = lmdb.open(str(data_file(tmp_path).parent), max_dbs=2)
    with env.begin(write=True) as txn:
        txn.delete(b"format", db=env.open_db(b"offsets", txn=txn))
    env.close()
    with pytest.raises(CorruptStateError, match="record format"):
        open_store(tmp_path)


def open_versioned(root: Path, reader: type[LayeredVersionedStore]) -> LayeredVersionedStore:
    store = (
        LMDBVersionedStore("s", 10_000)
        if reader is LMDBVersionedStore
        else LayeredVersionedStore(LMDBKeyValueStore("s"), 10_000)
    )
    store.init(make_context(root, "s"))
    return store


def versioned_filled(root: Path, keys: int) -> None:
    """Keys with versions at 10, 20 and 30; every third deleted at 25, every fifth only at 30."""
    store = open_versioned(root, LMDBVersionedStore)
    for i in range(keys):
        key = b"key-%06d" % i
        for stamp in (30,) if i % 5 == 0 else (10, 20, 30):
            store.put(key, b"%d@%d" % (i, stamp), stamp)
        if i % 3 == 0:
            store.put(key, None, 25)
    store.commit({TP: 1})
    store.close()


def as_of_rows(store: LayeredVersionedStore, as_of: int | None, limit: int | None) -> list[object]:
    with store.range_as_of(None, None, as_of, limit) as rows:
        return [(key, r.value, r.timestamp, r.valid_to) for key, r in rows]


@pytest.mark.parametrize("limit", [None, 1, 99, 100, 101, 250])
@pytest.mark.parametrize("as_of", [None, 15, 26, 5])
def test_as_of_ranges_read_in_place_answer_as_the_layered_store(
    tmp_path: Path, as_of: int | None, limit: int | None
) -> None:
    """LMDB's versioned store reads timelines in the map in place, chunk after chunk (of at
    least 100, many holding no version at `as_of`): the same rows as the layered reading."""
    versioned_filled(tmp_path, 1_500)
    in_place = open_versioned(tmp_path, LMDBVersionedStore)
    expected_rows = as_of_rows(in_place, as_of, limit)
    in_place.close()
    layered = open_versioned(tmp_path, LayeredVersionedStore)
    try:
        assert expected_rows == as_of_rows(layered, as_of, limit)
    finally:
        layered.close()
    if as_of == 26 and limit is None:  # every third key deleted at 25, every fifth from 30
        assert len(expected_rows) == 1_500 - 500 - 300 + 100


def test_an_as_of_range_reads_a_batchs_writes_through_the_overlay(tmp_path: Path) -> None:
    versioned_filled(tmp_path, 300)
    store = open_versioned(tmp_path, LMDBVersionedStore)
    try:
        store.put(b"key-000001", b"new", 40)  # not committed: only the overlay has it
        rows = as_of_rows(store, None, 3)
        assert rows == [
            (b"key-000000", b"0@30", 30, None),
            (b"key-000001", b"new", 40, None),
            (b"key-000002", b"2@30", 30, None),
        ]
    finally:
        store.close()


def test_a_damaged_timeline_is_refused_by_an_as_of_range(tmp_path: Path) -> None:
    """A timeline whose bytes changed on disk fails the range that reads it, naming the
    record; the ranges short of it are answered."""
    versioned_filled(tmp_path, 400)
    path = data_file(tmp_path)
    content = path.read_bytes()
    at = content.index(b"301@20")
    with path.open("r+b") as handle:
        handle.seek(at)
        handle.write(b"9")  # key 301's version at 20 now reads 901@20
    store = open_versioned(tmp_path, LMDBVersionedStore)
    try:
        with pytest.raises(CorruptStateError, match="damaged record"):
            as_of_rows(store, 22, None)
        with store.range_as_of(b"key-000290", b"key-000300", 22) as rows:
            assert [key for key, _ in rows][-1] == b"key-000299"
    finally:
        store.close()


def test_reads_in_other_threads_while_the_map_grows_are_answered(tmp_path: Path) -> None:
    """Growing the map invalidates every read transaction open in the process (and unmaps
    what reads in place point at): reads and growth take turns, so each read answers a
    committed state instead of failing as if the store were damaged."""
    store = LMDBVersionedStore("s", 10**9)
    store.init(make_context(tmp_path, "s", config={"initial_map_mb": 1}))
    store.put_all([(b"a%04d" % i, 1, b"v" * 100) for i in range(100)])
    store.commit({TP: 0})
    before = store.key_value_store.map_size()  # type: ignore[attr-defined]
    failures: list[BaseException] = []
    counts: list[list[int]] = [[] for _ in range(3)]
    done = threading.Event()

    def reader(seen: list[int]) -> None:
        try:
            while not done.is_set():
                with store.range_as_of(None, None, None) as rows:
                    seen.append(sum(1 for _ in rows))
                assert store.get(b"a0007") is not None
                time.sleep(0.002)  # the writer gets the interpreter too
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=reader, args=(seen,)) for seen in counts]
    for thread in threads:
        thread.start()
    try:
        for batch in range(1, 21):
            store.put_all([(b"b%02d-%04d" % (batch, i), batch, b"x" * 4000) for i in range(100)])
            store.commit({TP: batch})
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert not failures, failures
    assert store.key_value_store.map_size() >= 8 * before  # type: ignore[attr-defined]
    for seen in counts:  # answered, from what was written (not a snapshot: see the runtime)
        assert seen and all(100 <= count <= 2_100 for count in seen)
    assert sum(1 for _ in store.range_as_of(None, None, None)) == 2_100
    store.close()


def test_a_key_lmdb_cannot_keep_is_refused_by_size_not_called_damage(tmp_path: Path) -> None:
    # LMDB keeps keys of 1 to 511 bytes; an empty word is an ordinary key elsewhere. The
    # runtime refuses such a key at the put (tests/runtime/test_key_sizes.py); the store's
    # commit refuses it too, for a caller that writes to it directly, naming the sizes.
    store = open_store(tmp_path / "direct")
    store.put_all([(b"a", b"1"), (b"", b"empty"), (b"x" * 600, b"long")])
    with pytest.raises(LMDBKeySizeError, match=r"keys of \[0, 600\] bytes: LMDB keys are 1 to"):
        store.commit({})
    store.close()
    app = Application("l", tmp_path)
    app.key_value_store("kv", 1, engine="lmdb", key_serde="bytes")
    with app:
        with app.begin_batch(position={"t": {0: 1}}, batch_id=1) as batch:
            batch.put("kv", b"a", "kept")
        with (
            pytest.raises(ValueError, match=r"a key of 600 bytes.*keys of 1 to 511 bytes"),
            app.begin_batch(position={"t": {0: 2}}, batch_id=2) as batch,
        ):
            batch.put("kv", b"x" * 600, "long")
    reopened = Application("l", tmp_path)
    reopened.key_value_store("kv", 1, engine="lmdb", key_serde="bytes")
    with reopened:  # the files are fine, at the last commit
        result = reopened.query(
            StateQueryRequest.in_store("kv").with_query(RangeQuery.with_no_bounds())
        ).only_partition_result()
        assert result is not None and list(result.result) == [(b"a", "kept")]


BUSY_READERS = """
import sys, threading, time
from pathlib import Path
from typing import Any
from iqstate_lmdb import LMDBKeyValueStore
from iqstate.position import TopicPartition
from iqstate.testing import make_context

store = LMDBKeyValueStore("s")
store.init(make_context(Path(sys.argv[1]), "s", config={"initial_map_mb": 1}))
store.put(b"counter", b"0")
store.commit({TopicPartition("t", 0): 0})
done = threading.Event()

def reader() -> None:
    while not done.is_set():  # never pausing: some thread is always inside LMDB
        store.get(b"counter")
        store.get(b"missing")

threads = [threading.Thread(target=reader, daemon=True) for _ in range(4)]
for thread in threads:
    thread.start()
before = store.map_size()
for batch in range(1, 9):
    store.put_all([(b"b%03d-%04d" % (batch, i), b"x" * 2000) for i in range(200)])
    store.commit({TopicPartition("t", 0): batch})
done.set()
print(store.map_size() // before, sum(1 for _ in store.range(None, None)))
"""


def test_the_map_grows_while_other_threads_keep_reading(tmp_path: Path) -> None:
    """A commit that fills the map ends its write transaction once the readers have
    stopped: py-lmdb's abort waits until no thread is inside an LMDB call, which readers
    that never pause never let happen (the commit hung). In a process of its own, so that
    a hang fails the test instead of the suite."""
    script = tmp_path / "busy_readers.py"
    script.write_text(BUSY_READERS)
    finished = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "env")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    grown, rows = map(int, finished.stdout.split())
    assert grown >= 4 and rows == 1 + 8 * 200


def test_a_key_lmdb_cannot_hold_is_absent_when_asked(tmp_path: Path) -> None:
    """An empty or over-long key is an ordinary question (the empty string is a valid
    string key): LMDB refuses to look it up, and no store holds it, so it is absent, not a
    damaged store."""
    app = Application("l", tmp_path)
    app.key_value_store("raw", 1, engine="lmdb", key_serde="bytes")
    app.key_value_store("text", 1, engine="lmdb")
    with app:
        with app.begin_batch(position={"t": {0: 1}}, batch_id=1) as batch:
            batch.put("raw", b"a", "kept")
            batch.put("text", "a", "kept")
        for store, key in (("raw", b""), ("raw", b"x" * 600), ("text", "")):
            answer = app.query(StateQueryRequest.in_store(store).with_query(KeyQuery.with_key(key)))
            only = answer.partition_results[0]
            assert only.is_success and only.result is None, (store, key)


def test_more_readers_than_the_reader_table_holds_is_load_not_damage(tmp_path: Path) -> None:
    """Threads reading one store directly, more at once than `max_readers`: LMDB refuses
    the extra read transaction, which says nothing about the files (the runtime reads a
    partition one query at a time)."""
    store = opened(LMDBKeyValueStore("s"), tmp_path, max_readers=4)
    store.put_all([(b"k%06d" % i, b"v") for i in range(100)])
    store.commit({TP: 1})
    inside, release = threading.Semaphore(0), threading.Event()

    def hold(records: Any) -> int:
        inside.release()
        release.wait(30)
        return sum(1 for _ in records)

    threads = [threading.Thread(target=store.read_stored, args=(b"", hold)) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        for _ in threads:  # every slot of the reader table taken
            assert inside.acquire(timeout=30)
        with pytest.raises(StateStorageError, match="reader table.*max_readers"):
            list(store.range(None, None))
    finally:
        release.set()
        for thread in threads:
            thread.join()
    assert sum(1 for _ in store.range(None, None)) == 100, "the store reads as before"
    store.close()


def test_closing_while_other_threads_read_waits_for_them_and_refuses_later_reads(
    tmp_path: Path,
) -> None:
    """Threads reading one store directly while another closes it: a read in progress (in
    place, on memoryviews into the map) ends before the map is unmapped, and every read
    after it fails as a read of a closed store, never as damage."""
    store = opened(LMDBKeyValueStore("s"), tmp_path)
    store.put_all([(b"k%06d" % i, b"v" * 100) for i in range(2_000)])
    store.commit({TP: 1})
    inside, release = threading.Event(), threading.Event()

    def hold_then_read(records: Any) -> int:
        inside.set()
        release.wait(30)
        return sum(len(bytes(key)) + len(bytes(value)) for key, value in records)

    in_place: list[int] = []
    holder = threading.Thread(
        target=lambda: in_place.append(store.read_stored(b"", hold_then_read))
    )
    holder.start()
    assert inside.wait(30)
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "the close waits for the read in progress"
    release.set()
    holder.join(30)
    closer.join(30)
    assert in_place == [2_000 * (7 + 100 + 4)], "the read in place saw the whole map"

    failures: list[BaseException] = []
    done = threading.Event()
    reopened = opened(LMDBKeyValueStore("s"), tmp_path)
    reads = [
        lambda: reopened.get(b"k000007"),
        lambda: list(reopened.range(b"k000100", b"k000200")),
        lambda: reopened.read_stored(b"k", lambda records: sum(1 for _ in records)),
    ]

    def reader(read: Any) -> None:
        try:
            while not done.is_set():
                read()
        except ClosedStoreError:
            return
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=reader, args=(read,)) for read in reads]
    for thread in threads:
        thread.start()
    time.sleep(0.05)
    reopened.close()
    done.set()
    for thread in threads:
        thread.join(30)
    assert not failures, failures  # a CorruptStateError here would set the files aside
    final = opened(LMDBKeyValueStore("s"), tmp_path)
    assert final.get(b"k000007") == b"v" * 100, "closed cleanly, nothing lost"
    final.close()
