"""The compiled JSON writer (iqstate-speedups): the standard library's bytes or `None`.

It must write every plain JSON value itself (that is where the speed comes from) and
decline, rather than guess, everything the standard library treats specially.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.collection import call_with_a_collection_inside

json_writer = pytest.importorskip(
    "iqstate_speedups.json_writer", reason="iqstate-speedups is not built here (no C compiler)"
)

STDLIB = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def stdlib_bytes(value: Any) -> bytes:
    return STDLIB.encode(value).encode("utf-8")


plain_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e-7, 1e-5, 1e-4, 5e-324, 1e16, 1e21, 1e300, -0.0, 2.0**53, 0.1, 1 / 3]
)
plain_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | plain_floats
    | st.text()
)
plain_values = st.recursive(
    plain_scalars,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(), inner, max_size=6)
    ),
    max_leaves=30,
)


@given(plain_values)
def test_plain_json_values_are_written_here_with_the_standard_librarys_bytes(value: Any) -> None:
    assert json_writer.encode(value) == stdlib_bytes(value)


@given(st.lists(plain_values, max_size=8))
def test_a_list_of_values_gives_each_values_bytes(values: list[Any]) -> None:
    assert json_writer.encode_many(values) == [stdlib_bytes(value) for value in values]


class Name(str):
    pass


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


DECLINED = [
    float("nan"),
    [1.0, float("inf")],
    {"a": -float("inf")},
    {1: "an int key"},
    {None: "a null key"},
    Name("a str subclass"),
    {Name("k"): 1},
    OrderedDict(a=1),
    "\ud800",
    {"\udfff": 1},
    b"bytes",
    {1, 2},
    10**5000,  # beyond int.__repr__'s digit limit: the standard library raises
    nested(65),
]


@pytest.mark.parametrize("value", DECLINED, ids=lambda value: type(value).__name__)
def test_what_the_standard_library_treats_specially_is_declined(value: Any) -> None:
    assert json_writer.encode(value) is None
    assert json_writer.encode_many([1, value, "x"]) == [b"1", None, b'"x"']


def test_nesting_up_to_its_limit_is_written_here() -> None:
    assert json_writer.encode(nested(64)) == stdlib_bytes(nested(64))


def test_a_cycle_is_declined_not_followed() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert json_writer.encode(loop) is None


def test_every_control_character_is_escaped_as_the_standard_library_escapes_it() -> None:
    text = "".join(map(chr, range(0x80))) + "\u2028\u2029\ufeff\U0010ffff"
    assert json_writer.encode(text) == stdlib_bytes(text)
    assert json_writer.encode({text: text}) == stdlib_bytes({text: text})


def test_encode_many_takes_a_list_only() -> None:
    with pytest.raises(TypeError, match="encode_many takes a list, not tuple"):
        json_writer.encode_many((1, 2))


def test_values_are_not_retained() -> None:
    value = {"k": [1.5, "text"]}
    before = sys.getrefcount(value)
    for _ in range(100):
        json_writer.encode(value)
        json_writer.encode_many([value, value])
    assert sys.getrefcount(value) == before


def test_a_list_changed_by_a_finalizer_mid_call_is_written_as_it_was() -> None:
    values: list[Any] = ["\ud800", *([str(i) * 50] for i in range(2000))]
    expected = [None, *map(stdlib_bytes, values[1:])]
    assert call_with_a_collection_inside(json_writer.encode_many, list(values)) == expected


def test_non_ascii_strings_keep_no_utf8_copy() -> None:
    text = "é" * 1000
    size = sys.getsizeof(text)
    json_writer.encode(text)
    json_writer.encode_many([{text: text}])
    assert sys.getsizeof(text) == size
