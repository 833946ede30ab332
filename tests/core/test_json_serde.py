"""The JSON serde writes exactly the standard library's bytes and reads exactly its values.

Stores and changelogs written before the serde used orjson must read the same, and keys
must partition the same, so every output is compared byte for byte with the standard
library's encoder as the serde used it (compact, `ensure_ascii=False`, `allow_nan=False`),
every refusal with its error, and every decoded value (and decoding error) with its decoder.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import decimal
import enum
import json
import pickle
import uuid
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate import Serdes, SerializationError
from iqstate.serdes import JsonSerde

SERDE = Serdes.json()
# Both ways of writing: the compiled writer where iqstate-speedups is built (the default),
# and msgspec checked by reading back (where it is not).
WRITERS = pytest.mark.parametrize(
    "serde", [SERDE, JsonSerde(compiled=False)], ids=["default", "msgspec-checked"]
)
STDLIB = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def stdlib_bytes(value: Any) -> bytes:
    return STDLIB.encode(value).encode("utf-8")


def stdlib_value(data: bytes) -> Any:
    return json.JSONDecoder().decode(data.decode("utf-8"))


floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e-7, 1e-5, 1.5e-5, 1e-4, 1.234e-300, 5e-324, 1e16, 1.5e16, 1e21, 1e300, -0.0, 0.0, 2.0**53]
)
scalars = st.none() | st.booleans() | st.integers() | floats | st.text()
keys = st.text() | st.integers() | floats | st.booleans() | st.none()
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.tuples(inner, inner)
        | st.dictionaries(keys, inner, max_size=6)
    ),
    max_leaves=30,
)


@given(json_values)
@WRITERS
def test_bytes_are_the_standard_librarys(serde: JsonSerde, value: Any) -> None:
    assert serde.serialize(value) == stdlib_bytes(value)


@given(json_values)
def test_values_read_back_as_the_standard_library_reads_them(value: Any) -> None:
    data = stdlib_bytes(value)
    # repr tells -0.0 from 0.0, 1 from 1.0 and True from 1, and keeps the key order
    assert repr(SERDE.deserialize(data)) == repr(stdlib_value(data))
    assert repr(SERDE.deserialize_many([data, data])) == repr([stdlib_value(data)] * 2)


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Mode(enum.StrEnum):
    FAST = "fast"


class Name(str):
    pass


@dataclasses.dataclass
class Point:
    x: int


def nested(depth: int, leaf: Any) -> Any:
    """`leaf` inside `depth` lists: deeper than the compiled writer goes."""
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


REFUSED = [
    b"raw bytes",
    {1, 2},
    frozenset({1}),
    uuid.UUID(int=7),
    Color.RED,
    decimal.Decimal("1.5"),
    float("nan"),
    float("inf"),
    -float("inf"),
    {"deep": [1, {"x": float("nan")}]},
    datetime.datetime(2024, 1, 1),
    datetime.date(2024, 1, 1),
    Point(1),
    object(),
    {"k": {1}},
    [uuid.UUID(int=1)],
    {(1, 2): 3},
    "\ud800",
    circular(),
    10**5000,
    nested(100, float("inf")),
]


@pytest.mark.parametrize("value", REFUSED, ids=lambda value: type(value).__name__)
@WRITERS
def test_refusals_are_the_standard_librarys(serde: JsonSerde, value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as stdlib_error:
        stdlib_bytes(value)
    with pytest.raises(SerializationError) as error:
        serde.serialize(value)
    assert str(error.value) == (
        f"serde json cannot encode a value of type {type(value).__name__}: {stdlib_error.value}"
    )


ACCEPTED = [
    Level.HIGH,
    {"level": Level.HIGH, "mode": Mode.FAST},
    Name("a name"),
    {Name("k"): Name("v")},
    OrderedDict([("b", 1), ("a", 2)]),
    (1, "two", [3.0]),
    {"big": 2**64, "small": -(2**63) - 1, "huge": 10**40},
    {"tiny": 1e-7, "text": "re-run 0.00001 1e-5"},
    {1: "int key", 2.5: "float key", False: "bool key", None: "null key"},
    '\x00\x1f\x7f\u2028 é 😀 "quoted" \\',
    nested(100, {"leaf": 1.5}),
]


@pytest.mark.parametrize("value", ACCEPTED, ids=lambda value: type(value).__name__)
@WRITERS
def test_accepted_values_are_written_as_the_standard_library_writes_them(
    serde: JsonSerde, value: Any
) -> None:
    assert serde.serialize(value) == stdlib_bytes(value)


MALFORMED_OR_UNUSUAL = [
    b"NaN",
    b"[Infinity, -Infinity]",
    b"1E400",
    b"-0",
    b" 1 ",
    b"\xff",
    b'"\\ud800"',
    b'{"a":1,"a":2}',
    b"1" + b"0" * 40,
    b"[1,]",
    b"\xef\xbb\xbf1",
    b"01",
    b"1.",
    b'"tab\there"',
    b"",
    b"[" * 100_000,
    b'{"a":1}x',
]


def outcome(decode: Any, data: bytes) -> str:
    try:
        return repr(decode(data))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("data", MALFORMED_OR_UNUSUAL, ids=lambda data: repr(data[:12]))
def test_unusual_bytes_read_as_the_standard_library_reads_them(data: bytes) -> None:
    assert outcome(SERDE.deserialize, data) == outcome(stdlib_value, data)


@given(st.binary(max_size=40) | st.text(max_size=40).map(lambda text: text.encode()))
def test_arbitrary_bytes_read_as_the_standard_library_reads_them(data: bytes) -> None:
    assert outcome(SERDE.deserialize, data) == outcome(stdlib_value, data)


@given(st.lists(json_values, max_size=8))
@WRITERS
def test_encoding_many_gives_the_standard_librarys_bytes(
    serde: JsonSerde, values: list[Any]
) -> None:
    assert serde.serialize_many(values) == [stdlib_bytes(value) for value in values]


@pytest.mark.parametrize("value", REFUSED, ids=lambda value: type(value).__name__)
@WRITERS
def test_encoding_many_raises_at_a_refused_value(serde: JsonSerde, value: Any) -> None:
    with pytest.raises(
        SerializationError, match=f"cannot encode a value of type {type(value).__name__}"
    ):
        serde.serialize_many([{"fine": 1}, value, {"fine": 2}])


@WRITERS
def test_a_serde_pickles_and_writes_the_same_after(serde: JsonSerde) -> None:
    # A Spark job ships its serdes to the executors by pickling them.
    for copied in (pickle.loads(pickle.dumps(serde)), copy.deepcopy(serde)):
        assert copied == serde
        assert copied.serialize({"a": [1.5, "é"]}) == stdlib_bytes({"a": [1.5, "é"]})


@WRITERS
def test_encoding_many_takes_any_sequence(serde: JsonSerde) -> None:
    values = ({"a": 1}, [2.5], "three")
    assert serde.serialize_many(values) == [stdlib_bytes(value) for value in values]  # type: ignore[arg-type]
