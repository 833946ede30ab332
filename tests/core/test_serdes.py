"""Built-in serdes: round trips, order preservation, Kafka compatibility, clear errors."""

import math
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate import Serde, Serdes, SerializationError

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
floats = st.floats(allow_nan=False)


@given(int64s)
def test_int64_round_trip(value: int) -> None:
    data = Serdes.int64().serialize(value)
    assert len(data) == 8 and Serdes.int64().deserialize(data) == value


@given(int64s, int64s)
def test_int64_preserves_order(a: int, b: int) -> None:
    serde = Serdes.int64()
    assert (a < b) == (serde.serialize(a) < serde.serialize(b))


@given(floats)
def test_float64_round_trip(value: float) -> None:
    data = Serdes.float64().serialize(value)
    decoded = Serdes.float64().deserialize(data)
    assert len(data) == 8 and decoded == value
    assert math.copysign(1.0, decoded) == math.copysign(1.0, value)


@given(floats, floats)
def test_float64_preserves_order(a: float, b: float) -> None:
    serde = Serdes.float64()
    if a < b:
        assert serde.serialize(a) < serde.serialize(b)
    elif a > b:
        assert serde.serialize(a) > serde.serialize(b)


def test_float64_orders_infinities_and_signed_zero() -> None:
    serde = Serdes.float64()
    ordered = [-math.inf, -1e308, -1.0, -5e-324, -0.0, 0.0, 5e-324, 1.0, math.inf]
    assert sorted(ordered, key=serde.serialize) == ordered
    assert Serdes.float64().deserialize(serde.serialize(3)) == 3.0


@given(st.text(), st.text())
def test_string_is_utf8_and_preserves_code_point_order(a: str, b: str) -> None:
    serde = Serdes.string()
    assert serde.serialize(a) == a.encode("utf-8")
    assert serde.deserialize(serde.serialize(a)) == a
    assert (a < b) == (serde.serialize(a) < serde.serialize(b))


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.text()
        | st.floats(allow_nan=False, allow_infinity=False),
        lambda children: st.lists(children) | st.dictionaries(st.text(), children),
        max_leaves=10,
    )
)
def test_json_round_trip(value: object) -> None:
    assert Serdes.json().deserialize(Serdes.json().serialize(value)) == value


def test_bytes_serde() -> None:
    assert Serdes.bytes().serialize(bytearray(b"ab")) == b"ab"
    assert Serdes.bytes().deserialize(memoryview(b"ab")) == b"ab"


@pytest.mark.parametrize(
    ("serde", "bad"),
    [
        (Serdes.string(), 5),
        (Serdes.int64(), "5"),
        (Serdes.int64(), True),
        (Serdes.int64(), 2**63),
        (Serdes.float64(), "1.0"),
        (Serdes.bytes(), "text"),
        (Serdes.json(), {1, 2}),
        (Serdes.json(), float("nan")),
    ],
)
def test_refusals_name_the_serde_and_the_type(serde: object, bad: object) -> None:
    with pytest.raises(SerializationError) as error:
        serde.serialize(bad)  # type: ignore[attr-defined]
    assert serde.name in str(error.value) and type(bad).__name__ in str(error.value)  # type: ignore[attr-defined]


def test_serdes_are_singletons_with_names() -> None:
    assert Serdes.string() is Serdes.string()
    assert repr(Serdes.int64()) == "Serdes.int64()"
    assert Serdes.string().order_preserving and not Serdes.json().order_preserving
    assert struct.unpack(">Q", Serdes.int64().serialize(0))[0] == 1 << 63


ENCODABLE: list[tuple[Serde[Any], st.SearchStrategy[Any]]] = [
    (Serdes.string(), st.text(st.characters(exclude_categories=["Cs"]))),
    (Serdes.bytes(), st.binary()),
    (Serdes.int64(), int64s),
    (Serdes.float64(), floats),
    (Serdes.json(), st.dictionaries(st.text(), st.integers() | st.text())),
]
"""Each built-in serde with values it encodes (no lone surrogates: UTF-8 refuses them)."""


def serde_and(values: Callable[[st.SearchStrategy[Any]], st.SearchStrategy[Any]]) -> Any:
    """A built-in serde with what `values` makes of its value strategy."""
    return st.sampled_from(ENCODABLE).flatmap(
        lambda pair: st.tuples(st.just(pair[0]), values(pair[1]))
    )


@given(st.data())
def test_decoding_many_gives_what_decoding_each_gives(data: st.DataObject) -> None:
    serde, values = data.draw(serde_and(lambda each: st.lists(each, max_size=20)))
    stored = [serde.serialize(value) for value in values]
    assert serde.deserialize_many(stored) == [serde.deserialize(one) for one in stored]


@given(st.data())
def test_encoding_many_gives_what_encoding_each_gives(data: st.DataObject) -> None:
    serde, values = data.draw(serde_and(lambda each: st.lists(each, max_size=20)))
    assert serde.serialize_many(values) == [serde.serialize(value) for value in values]


def test_encoding_many_raises_where_encoding_one_does() -> None:
    with pytest.raises(UnicodeEncodeError):
        Serdes.string().serialize_many(["fine", "\ud800"])
    with pytest.raises(TypeError):
        Serdes.string().serialize_many(["fine", 3])


def test_decoding_many_raises_where_decoding_one_does() -> None:
    with pytest.raises(UnicodeDecodeError):
        Serdes.string().deserialize_many([b"fine", b"\xff"])
    with pytest.raises(ValueError):
        Serdes.json().deserialize_many([b"{}", b"{not json"])


@given(st.data())
def test_quick_coders_give_what_the_serde_gives(data: st.DataObject) -> None:
    serde, value = data.draw(serde_and(lambda each: each))
    encoded = serde.serialize(value)
    assert serde.quick_serializer()(value) == encoded
    assert serde.quick_deserializer()(encoded) == serde.deserialize(encoded)


@pytest.mark.parametrize(
    ("serde", "bad"),
    [
        (Serdes.string(), 5),
        (Serdes.string(), b"bytes"),
        (Serdes.string(), "\ud800"),
        (Serdes.int64(), "5"),
        (Serdes.bytes(), "text"),
        (Serdes.json(), {1, 2}),
    ],
)
def test_quick_serializers_raise_where_serialize_refuses(serde: object, bad: object) -> None:
    with pytest.raises(Exception):  # noqa: B017 - any exception; the caller reports serialize's
        serde.quick_serializer()(bad)  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [b"\xff", "text", None])
def test_the_quick_string_decoder_raises_where_bytes_are_not_utf8(bad: object) -> None:
    with pytest.raises((UnicodeDecodeError, TypeError)):
        Serdes.string().quick_deserializer()(bad)  # type: ignore[arg-type]


def test_a_serde_subclass_keeps_its_own_coding_on_the_quick_path() -> None:
    class Reversed(type(Serdes.string())):  # type: ignore[misc]
        def serialize(self, value: str) -> bytes:
            return value[::-1].encode()

        def deserialize(self, data: bytes) -> str:
            return data.decode()[::-1]

    serde = Reversed()
    assert serde.quick_serializer()("abc") == b"cba"
    assert serde.quick_deserializer()(b"cba") == "abc"
