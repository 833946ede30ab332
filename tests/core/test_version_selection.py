"""An as-of range's selection of versions: the compiled loop (iqstate-speedups) answers
exactly as the Python one, and both refuse a damaged value rather than return part of it;
the compiled selection over sealed timelines read in place answers as unsealing them and
selecting, and refuses a record whose checksum fails."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate.errors import CorruptStateError
from iqstate.sealing import seal
from iqstate.testing import make_context
from iqstate.version_history import found_at, pack_history, pack_timeline
from iqstate.version_selection import FoundLists, select_found_in_python
from iqstate.versioned_store import LayeredVersionedStore

compiled = pytest.importorskip("iqstate_speedups.versions")

TIME = st.integers(-(1 << 63), (1 << 63) - 1)
VALUE = st.none() | st.binary(max_size=12)


@st.composite
def timelines(draw: st.DrawFn) -> bytes:
    """A key's timeline: older versions at distinct ascending times, then the current one."""
    stamps = sorted(draw(st.sets(st.integers(-1000, 1000), min_size=1, max_size=8)))
    versions = [(stamp, draw(VALUE)) for stamp in stamps]
    return pack_timeline(versions[-1], pack_history(versions[:-1]))


def both(
    rows: list[tuple[bytes, bytes]], as_of: int | None, boundary: int, wanted: int | None
) -> tuple[FoundLists, FoundLists]:
    in_c: FoundLists = ([], [], [], [])
    in_python: FoundLists = ([], [], [], [])
    compiled.select_found(rows, as_of, boundary, wanted, in_c)
    select_found_in_python(rows, as_of, boundary, wanted, in_python)
    return in_c, in_python


@given(
    st.lists(timelines(), max_size=6),
    st.none() | st.integers(-1100, 1100) | TIME,
    st.integers(-1100, 1100),
    st.none() | st.integers(0, 7),
)
def test_the_compiled_selection_answers_as_the_python_one(
    found: list[bytes], as_of: int | None, boundary: int, wanted: int | None
) -> None:
    rows = [(b"\x05key%d" % index, timeline) for index, timeline in enumerate(found)]
    in_c, in_python = both(rows, as_of, boundary, wanted)
    assert in_c == in_python
    # and each is the version a point lookup finds
    expected = [(key[1:], found_at(t, as_of, boundary)) for key, t in rows]
    expected = [(key, version) for key, version in expected if version is not None]
    if wanted is not None:
        expected = expected[:wanted]
    assert list(zip(in_c[0], zip(*in_c[1:], strict=True), strict=True)) == expected


@given(timelines(), st.data())
def test_a_damaged_timeline_is_refused_by_both(timeline: bytes, data: st.DataObject) -> None:
    """Cut anywhere inside what its lengths declare, a timeline is an error, never a value."""
    cut = timeline[: data.draw(st.integers(0, len(timeline) - 1))]
    rows = [(b"\x05k", cut)]
    as_of = data.draw(st.none() | st.integers(-1100, 1100))
    try:
        select_found_in_python(rows, as_of, -2000, None, ([], [], [], []))
    except (ValueError, struct.error):
        python_refused = True
    else:
        python_refused = False
    try:
        compiled.select_found(rows, as_of, -2000, None, ([], [], [], []))
    except ValueError:
        c_refused = True
    else:
        c_refused = False
    assert c_refused == python_refused
    # a cut that leaves the version asked for whole may still answer it; one that does not
    # is refused (the current version's bytes always precede the history's)
    if len(cut) < 13 or as_of is None:
        assert c_refused == (len(cut) < 13 + struct.unpack_from(">I", timeline, 9)[0])


def test_bad_arguments_name_what_is_wrong() -> None:
    with pytest.raises(TypeError, match="rows must be a list"):
        compiled.select_found((), None, 0, None, ([], [], [], []))
    with pytest.raises(TypeError, match="pairs of bytes"):
        compiled.select_found([("k", b"")], None, 0, None, ([], [], [], []))
    with pytest.raises(TypeError, match="four lists"):
        compiled.select_found([], None, 0, None, ([], []))
    with pytest.raises(TypeError, match="as_of must be an int"):
        compiled.select_found([], "now", 0, None, ([], [], [], []))


@st.composite
def sealed_scans(draw: st.DrawFn) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """Ascending `(0x05 + key, sealed timeline)` records and an upper bound: a key of
    them, one between or past them, or None."""
    timelines_drawn = draw(st.lists(timelines(), max_size=8))
    records = [
        (key, seal(key, timeline))
        for key, timeline in ((b"\x05k%02d" % (2 * i), t) for i, t in enumerate(timelines_drawn))
    ]
    upper = draw(st.none() | st.integers(-1, 2 * len(records) + 1).map(lambda n: b"\x05k%02d" % n))
    return records, upper


def selected_by_unsealing(
    records: list[tuple[bytes, bytes]],
    upper: bytes | None,
    limit: int,
    as_of: int | None,
    boundary: int,
    wanted: int | None,
) -> tuple[FoundLists, int, bytes | None]:
    """What select_sealed must give: the records up to `upper`, at most `limit`, unsealed and
    selected one at a time until `wanted` versions are found."""
    found: FoundLists = ([], [], [], [])
    read, last = 0, None
    for key, stored in records[:limit]:
        if (upper is not None and key > upper) or wanted == len(found[0]):
            break
        select_found_in_python([(key, stored[:-4])], as_of, boundary, None, found)
        read, last = read + 1, key
    return found, read, last


@given(
    sealed_scans(),
    st.integers(1, 9),
    st.none() | st.integers(-1100, 1100),
    st.integers(-1100, 1100),
    st.none() | st.integers(0, 9),
    st.booleans(),
)
def test_the_sealed_selection_answers_as_unsealing_then_selecting(
    scan: tuple[list[tuple[bytes, bytes]], bytes | None],
    limit: int,
    as_of: int | None,
    boundary: int,
    wanted: int | None,
    as_views: bool,
) -> None:
    """Given bytes or memoryviews (as an LMDB cursor in buffers mode gives them)."""
    records, upper = scan
    given_records = [(memoryview(k), memoryview(v)) for k, v in records] if as_views else records
    found: FoundLists = ([], [], [], [])
    answer = compiled.select_sealed(
        iter(given_records), upper, limit, as_of, boundary, wanted, found
    )
    expected, read, last = selected_by_unsealing(records, upper, limit, as_of, boundary, wanted)
    assert answer == (read, last)
    assert found == expected


@given(sealed_scans(), st.data())
def test_a_record_whose_checksum_fails_stops_the_sealed_selection(
    scan: tuple[list[tuple[bytes, bytes]], bytes | None], data: st.DataObject
) -> None:
    """None, with what was selected before the damaged record: the caller reads again to
    name it. A damaged key fails as a damaged value does."""
    records, _ = scan
    if not records:
        return
    damaged = data.draw(st.integers(0, len(records) - 1))
    key, stored = records[damaged]
    flip = data.draw(st.integers(0, len(key) + len(stored) - 1))
    whole = bytearray(key + stored)
    whole[flip] ^= 1 << data.draw(st.integers(0, 7))
    records[damaged] = (bytes(whole[: len(key)]), bytes(whole[len(key) :]))
    found: FoundLists = ([], [], [], [])
    assert compiled.select_sealed(iter(records), None, 100, None, -2000, None, found) is None
    expected, _, _ = selected_by_unsealing(records[:damaged], None, 100, None, -2000, None)
    assert found == expected


def test_the_sealed_selection_refuses_what_is_not_a_record() -> None:
    found: FoundLists = ([], [], [], [])
    with pytest.raises(TypeError, match="pairs of bytes-like"):
        compiled.select_sealed([("k", b"")], None, 10, None, 0, None, found)
    with pytest.raises(TypeError, match="pairs of bytes-like"):
        compiled.select_sealed([(b"k",)], None, 10, None, 0, None, found)
    released = memoryview(b"\x05k" + b"\x00" * 20)
    released.release()
    with pytest.raises(TypeError, match="pairs of bytes-like"):
        compiled.select_sealed([(released, b"")], None, 10, None, 0, None, found)
    with pytest.raises(TypeError, match="four lists"):
        compiled.select_sealed([], None, 10, None, 0, None, ([], []))
    with pytest.raises(ValueError, match="key-space prefix"):
        compiled.select_sealed([(b"", seal(b"", b"x" * 13))], None, 10, None, 0, None, found)


WITHOUT_SPEEDUPS = """
import sys
sys.modules["iqstate_speedups.versions"] = None  # as if it had not been built
from iqstate import Application, StateQueryRequest, VersionedKeyQuery, VersionedRangeQuery
from iqstate import version_selection

assert not version_selection.COMPILED
app = Application("plain-python", sys.argv[1])
app.versioned_key_value_store("v", 1, history_retention_ms=1_000, value_serde="string")
app.start()
with app.begin_batch() as batch:
    for key in ("a", "b", "c"):
        for stamp in (10, 20, 30):
            batch.put("v", key, f"{key}{stamp}", timestamp=stamp)
    batch.delete("v", "b", timestamp=25)
store = StateQueryRequest.in_store("v")
found = app.query(store.with_query(VersionedKeyQuery.with_key("a").as_of(25)))
with app.query(
    store.with_query(VersionedRangeQuery.with_range("a", "c").as_of(26))
).only_partition_result().result as rows:
    print([(key, r.value, r.timestamp, r.valid_to) for key, r in rows])
record = found.only_partition_result().result
print((record.value, record.timestamp, record.valid_to))
"""


def test_without_the_extension_versioned_reads_answer_the_same(tmp_path: Path) -> None:
    """The Python loops stand in where iqstate-speedups is not built: the same answers."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_SPEEDUPS, str(tmp_path / "state")],
        capture_output=True,
        text=True,
        check=True,
    )
    ranged, record = done.stdout.splitlines()
    assert ranged == "[('a', 'a20', 20, 30), ('c', 'c20', 20, 30)]"
    assert record == "('a20', 20, 30)"


def test_a_store_in_the_earlier_layout_is_refused_not_misread(tmp_path: Path) -> None:
    """The first layout kept current versions under `0x00 + key` and histories under
    `0x01 + key`; read as timelines they would be garbage, so opening one is an error
    that says what to do."""
    rocksdb = pytest.importorskip("iqstate_rocksdb.store")
    earlier = rocksdb.RocksDBKeyValueStore("v")
    earlier.init(make_context(tmp_path, "v"))
    earlier.put_all([(b"\x00k", b"\x00" * 8 + b"\x01value"), (b"\x02", b"\x00" * 8)])
    earlier.commit({})
    earlier.close()
    store = LayeredVersionedStore(rocksdb.RocksDBKeyValueStore("v"), 1_000)
    with pytest.raises(CorruptStateError, match="layout of an earlier iqstate.*rebuild it"):
        store.init(make_context(tmp_path, "v"))
