"""Bounded reads in chunks and bulk checksum checks (`iqstate.scanning`) against the plain
definitions: every record up to the bound, and every damaged record found."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from iqstate.scanning import take_while_at_least, take_while_below, unseal_all
from iqstate.sealing import seal, unseal

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


@given(records)
def test_unseal_all_gives_the_values_of_intact_records(pairs: list[tuple[bytes, bytes]]) -> None:
    sealed = [(key, seal(key, value)) for key, value in pairs]
    assert unseal_all(sealed) == pairs


@given(records.filter(bool), st.data())
def test_unseal_all_finds_any_damaged_record(
    pairs: list[tuple[bytes, bytes]], data: st.DataObject
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
