"""Bounded reads in chunks (`iqstate.scanning`) against the plain definitions: every record
up to the bound. Checksums (`iqstate.sealing`, compiled and in Python): every intact record
read back, every damaged record found."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.collection import call_with_a_collection_inside

from iqstate import sealing
from iqstate.scanning import take_while_at_least, take_while_below

_seal, _seal_pairs, _unseal, _unseal_all, _unseal_below, _unseal_at_least = sealing.PYTHON
# Both implementations: the one in use (compiled where iqstate-speedups is built) and the
# Python definitions; each is checked against the format itself, and against the other.
IMPLEMENTATIONS = pytest.mark.parametrize(
    ("seal", "seal_pairs", "unseal", "unseal_all"),
    [
        (sealing.seal, sealing.seal_pairs, sealing.unseal, sealing.unseal_all),
        sealing.PYTHON[:4],
    ],
    ids=["in-use", "python"],
)
SCANS = pytest.mark.parametrize(
    ("unseal_below", "unseal_at_least"),
    [(sealing.unseal_below, sealing.unseal_at_least), (_unseal_below, _unseal_at_least)],
    ids=["in-use", "python"],
)
Fn = Callable[..., Any]

sorted_keys = st.lists(st.binary(max_size=4), unique=True, max_size=300).map(sorted)


@given(sorted_keys, st.binary(max_size=4), st.booleans())
def test_take_while_below_is_the_prefix_up_to_the_bound(
    keys: list[bytes], upper: bytes, inclusive: bool
) -> None:
    records = [(key, b"v") for key in keys]
    expected = [r for r in records if r[0] < upper or (inclusive and r[0] == upper)]
    taken, stopped = take_while_below(iter(records), upper, inclusive)
    assert taken == expected
    assert stopped == (len(expected) < len(records))


@given(sorted_keys, st.binary(max_size=4))
def test_take_while_at_least_is_the_descending_prefix_down_to_the_bound(
    keys: list[bytes], lower: bytes
) -> None:
    records = [(key, b"v") for key in reversed(keys)]
    expected = [r for r in records if r[0] >= lower]
    taken, stopped = take_while_at_least(iter(records), lower)
    assert taken == expected
    assert stopped == (len(expected) < len(records))


records = st.lists(st.tuples(st.binary(max_size=20), st.binary(max_size=2000)), max_size=40)


@IMPLEMENTATIONS
@given(records)
def test_sealed_records_read_back_as_written(
    seal: Fn, seal_pairs: Fn, unseal: Fn, unseal_all: Fn, pairs: list[tuple[bytes, bytes]]
) -> None:
    sealed = [(key, seal(key, value)) for key, value in pairs]
    assert sealed == [(key, _seal(key, value)) for key, value in pairs], "one format"
    assert all(
        stored[:-4] == value and int.from_bytes(stored[-4:], "little") == zlib.crc32(key + value)
        for (key, value), (_, stored) in zip(pairs, sealed, strict=True)
    ), "the value, then the CRC-32 of key and value, little-endian"
    assert seal_pairs(dict(pairs).items()) == [(k, seal(k, v)) for k, v in dict(pairs).items()]
    assert seal_pairs([(b"gone", None)]) == [(b"gone", None)], "a delete stays a delete"
    assert [unseal(key, stored) for key, stored in sealed] == [value for _, value in pairs]
    assert unseal_all(sealed) == pairs


@IMPLEMENTATIONS
@given(records.filter(bool), st.data())
def test_any_damaged_record_is_found(
    seal: Fn,
    seal_pairs: Fn,
    unseal: Fn,
    unseal_all: Fn,
    pairs: list[tuple[bytes, bytes]],
    data: st.DataObject,
) -> None:
    sealed = [(key, seal(key, value)) for key, value in pairs]
    index = data.draw(st.integers(0, len(sealed) - 1))
    key, stored = sealed[index]
    if data.draw(st.booleans()):
        position = data.draw(st.integers(0, len(stored) - 1))
        flip = data.draw(st.integers(1, 255))
        stored = stored[:position] + bytes([stored[position] ^ flip]) + stored[position + 1 :]
    else:
        stored = stored[: data.draw(st.integers(0, len(stored) - 1))]
    damaged = [*sealed[:index], (key, stored), *sealed[index + 1 :]]
    assert unseal(key, stored) is None, "the damaged record fails its own check"
    assert unseal_all(damaged) is None, "and so the check of all records"


@IMPLEMENTATIONS
def test_records_shorter_than_the_tag_are_damaged(
    seal: Fn, seal_pairs: Fn, unseal: Fn, unseal_all: Fn
) -> None:
    for stored in (b"", b"\x00", b"abc"):
        assert unseal(b"", stored) is None
        assert unseal_all([(b"k", seal(b"k", b"v")), (b"", stored)]) is None


@pytest.mark.skipif(not sealing.COMPILED, reason="iqstate-speedups is not built here")
def test_the_compiled_functions_refuse_what_is_not_bytes() -> None:
    with pytest.raises(TypeError, match="value must be bytes-like, not str"):
        sealing.seal(b"k", "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seal takes 2 arguments"):
        sealing.seal(b"k")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="key must be bytes-like, not int"):
        sealing.seal_pairs([(1, b"v")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="unseal_all takes \\(key, stored\\) tuples of bytes"):
        sealing.unseal_all([(b"", b""), (None, b"")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="unseal_all takes a list, not tuple"):
        sealing.unseal_all(((b"k", b"v"),))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unseal_all takes \\(key, stored\\) tuples of bytes"):
        sealing.unseal_all([(b"k", bytearray(b"vvvvv"))])  # type: ignore[list-item]


@pytest.mark.skipif(not sealing.COMPILED, reason="iqstate-speedups is not built here")
def test_a_list_changed_by_a_finalizer_mid_check_is_read_as_it_was() -> None:
    pairs = [(b"k%04d" % i, b"v" * 100) for i in range(2000)]
    sealed = [(key, sealing.seal(key, value)) for key, value in pairs]
    assert call_with_a_collection_inside(sealing.unseal_all, sealed) == pairs


class Key(bytes):
    """A bytes subclass, as `Serdes.bytes()` passes keys such as `numpy.bytes_` through."""


@IMPLEMENTATIONS
def test_bytes_like_keys_and_values_are_sealed_as_their_bytes(
    seal: Fn, seal_pairs: Fn, unseal: Fn, unseal_all: Fn
) -> None:
    sealed = bytes(_seal(b"key", b"value"))
    assert bytes(seal(Key(b"key"), bytearray(b"value"))) == sealed
    assert [(k, bytes(v)) for k, v in seal_pairs([(Key(b"key"), memoryview(b"value"))])] == [
        (b"key", sealed)
    ]
    assert unseal(Key(b"key"), sealed) == b"value"
    assert unseal_all([(Key(b"key"), sealed)]) == [(b"key", b"value")]


def fresh(records: list[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """The records as an engine's cursor yields them: new objects nobody else holds."""
    return ((key, bytes(bytearray(stored))) for key, stored in records)


ranges = st.tuples(
    st.dictionaries(st.binary(max_size=4), st.binary(max_size=200), max_size=60),
    st.none() | st.binary(max_size=4),
    st.booleans(),
)


@SCANS
@given(ranges)
def test_a_checked_scan_reads_up_to_its_bound_and_unseals(
    unseal_below: Fn, unseal_at_least: Fn, case: tuple[dict[bytes, bytes], bytes | None, bool]
) -> None:
    contents, bound, inclusive = case
    pairs = sorted(contents.items())
    sealed = [(key, _seal(key, value)) for key, value in pairs]
    below = [(k, v) for k, v in pairs if bound is None or k < bound or (inclusive and k == bound)]
    at_least = [(k, v) for k, v in reversed(pairs) if bound is None or k >= bound]
    assert unseal_below(fresh(sealed), bound, inclusive) == below
    assert unseal_at_least(fresh(sealed[::-1]), bound) == at_least
    kept = list(sealed)
    assert unseal_below(iter(sealed), bound, inclusive) == below
    assert unseal_at_least(reversed(sealed), bound) == at_least
    assert sealed == kept, "records the caller still holds are left as they were"


@SCANS
@given(ranges.filter(lambda case: bool(case[0])), st.data())
def test_a_checked_scan_finds_a_damaged_record_within_its_bound(
    unseal_below: Fn,
    unseal_at_least: Fn,
    case: tuple[dict[bytes, bytes], bytes | None, bool],
    data: st.DataObject,
) -> None:
    contents, bound, inclusive = case
    sealed = sorted((key, _seal(key, value)) for key, value in contents.items())
    index = data.draw(st.integers(0, len(sealed) - 1))
    key, stored = sealed[index]
    sealed[index] = (key, stored[:-1] + bytes([stored[-1] ^ 1]))
    within = bound is None or key < bound or (inclusive and key == bound)
    below = unseal_below(fresh(sealed), bound, inclusive)
    assert (below is None) == within, "damage is found where read, and only there"
    assert (unseal_at_least(fresh(sealed[::-1]), bound) is None) == (bound is None or key >= bound)


@SCANS
def test_a_checked_scan_passes_on_its_iterators_error(
    unseal_below: Fn, unseal_at_least: Fn
) -> None:
    def failing() -> Iterator[tuple[bytes, bytes]]:
        yield b"a", _seal(b"a", b"1")
        raise OSError("page not found")

    with pytest.raises(OSError, match="page not found"):
        unseal_below(failing(), b"z", True)
    with pytest.raises(OSError, match="page not found"):
        unseal_at_least(failing(), None)


@pytest.mark.skipif(not sealing.COMPILED, reason="iqstate-speedups is not built here")
def test_the_compiled_scans_refuse_what_is_not_records_of_bytes() -> None:
    with pytest.raises(TypeError, match="records must be \\(key, stored\\) tuples of bytes"):
        sealing.unseal_below(iter([(b"k", "v")]), None, True)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="records must be"):
        sealing.unseal_at_least([[b"k", b"vvvvv"]], None)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="bound must be bytes-like, not int"):
        sealing.unseal_below([], 5, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not iterable"):
        sealing.unseal_below(5, None, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unseal_below takes 3 arguments"):
        sealing.unseal_below([], None)  # type: ignore[call-arg]
