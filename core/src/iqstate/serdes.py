"""Serdes: how typed keys and values become the bytes engines store.

Engines order keys by their bytes, so a key serde that is *order-preserving* makes
range queries follow the natural order of its type. `string`, `bytes`, `int64` and
`float64` are order-preserving (negative numbers included); `json` is not.
"""

from __future__ import annotations

import json
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import msgspec

from iqstate.errors import SerializationError

T = TypeVar("T")

_SIGN_BIT = 1 << 63
_MASK = (1 << 64) - 1
_U64 = struct.Struct(">Q")
_ONLY_BYTES = frozenset({bytes})


class Serde(ABC, Generic[T]):
    """Encodes values of one type to bytes and back."""

    name: ClassVar[str]
    order_preserving: ClassVar[bool] = False

    @abstractmethod
    def serialize(self, value: T) -> bytes:
        """The bytes of `value`; raises `SerializationError` naming the serde and the type."""

    @abstractmethod
    def deserialize(self, data: bytes) -> T:
        """The value encoded in `data`."""

    def serialize_many(self, values: list[T]) -> list[bytes]:
        """The bytes of each of `values`, in order (a batch's `put_all` encodes in one call).

        Raises when any fails; callers then encode one by one to name the failing value.
        """
        return list(map(self.serialize, values))

    def deserialize_many(self, data: list[bytes]) -> list[T]:
        """The values encoded in `data`, in order (range results decode in one call).

        Raises when any fails; callers then decode one by one to name the failing value.
        A serde may return `data` itself when its values are their own bytes.
        """
        return list(map(self.deserialize, data))

    def quick_serializer(self) -> Callable[[T], bytes]:
        """The cheapest callable giving `serialize`'s bytes for every value it accepts.

        For the rest it may raise anything; the key lookup path, which serializes one key
        per query with it, then serializes the key with `serialize`, which gives the bytes
        or the error to report. The default is `serialize` itself; override it when a
        builtin does the same job without a frame (and return `serialize` from a subclass
        that may code differently).
        """
        return self.serialize

    def quick_deserializer(self) -> Callable[[bytes], T]:
        """The cheapest callable giving `deserialize`'s value for every `bytes` it decodes;
        it may raise anything for the rest (callers then decode with `deserialize`)."""
        return self.deserialize

    def _refuse(self, value: object, why: str = "") -> SerializationError:
        detail = f": {why}" if why else ""
        return SerializationError(
            f"serde {self.name} cannot encode a value of type {type(value).__name__}{detail}"
        )

    def __repr__(self) -> str:
        return f"Serdes.{self.name}()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


class StringSerde(Serde[str]):
    """UTF-8, byte for byte what Kafka's `StringSerializer` writes."""

    name = "string"
    order_preserving = True

    def serialize(self, value: str) -> bytes:
        if not isinstance(value, str):
            raise self._refuse(value)
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise self._refuse(value, str(exc)) from exc

    def deserialize(self, data: bytes) -> str:
        return str(data, "utf-8")

    def quick_serializer(self) -> Callable[[str], bytes]:
        if type(self) is not StringSerde:  # a subclass may code differently
            return self.serialize
        return str.encode  # UTF-8; raises on anything but `str`, as `serialize` refuses

    def quick_deserializer(self) -> Callable[[bytes], str]:
        if type(self) is not StringSerde:
            return self.deserialize
        return bytes.decode  # UTF-8; raises on anything but `bytes`

    def serialize_many(self, values: list[str]) -> list[bytes]:
        return list(map(str.encode, values))  # UTF-8; raises on anything but `str`

    def deserialize_many(self, data: list[bytes]) -> list[str]:
        return list(map(bytes.decode, data))  # UTF-8; raises on anything but `bytes`


class BytesSerde(Serde[bytes]):
    """Bytes as they are."""

    name = "bytes"
    order_preserving = True

    def serialize(self, value: bytes) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, bytearray | memoryview):
            return bytes(value)
        raise self._refuse(value)

    def deserialize(self, data: bytes) -> bytes:
        return bytes(data)

    def quick_serializer(self) -> Callable[[bytes], bytes]:
        if type(self) is not BytesSerde:  # a subclass may code differently
            return self.serialize
        # `bytes` itself (a copy of a subclass); raises on a bytearray or memoryview, which
        # the key lookup then serializes with `serialize`
        return bytes.__bytes__

    def quick_deserializer(self) -> Callable[[bytes], bytes]:
        if type(self) is not BytesSerde:
            return self.deserialize
        return bytes.__bytes__

    def deserialize_many(self, data: list[bytes]) -> list[bytes]:
        if set(map(type, data)) <= _ONLY_BYTES:
            return data
        return list(map(bytes, data))


class Int64Serde(Serde[int]):
    """A signed 64-bit integer in 8 bytes whose byte order is numeric order.

    Big-endian with the sign bit flipped, so -1 sorts just below 0.
    """

    name = "int64"
    order_preserving = True

    def serialize(self, value: int) -> bytes:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._refuse(value)
        if not -_SIGN_BIT <= value < _SIGN_BIT:
            raise self._refuse(value, f"{value} is outside the signed 64-bit range")
        return _U64.pack((value + _SIGN_BIT) & _MASK)

    def deserialize(self, data: bytes) -> int:
        return int(_U64.unpack(data)[0]) - _SIGN_BIT


class Float64Serde(Serde[float]):
    """An IEEE-754 double in 8 bytes whose byte order is numeric order.

    Positive numbers get the sign bit set; negative numbers have every bit flipped, so
    more negative numbers sort lower. `-0.0` sorts just below `0.0`.
    """

    name = "float64"
    order_preserving = True

    def serialize(self, value: float) -> bytes:
        if isinstance(value, bool) or not isinstance(value, float | int):
            raise self._refuse(value)
        try:
            (bits,) = _U64.unpack(struct.pack(">d", value))
        except OverflowError as exc:
            raise self._refuse(value, str(exc)) from exc
        bits = (~bits & _MASK) if bits & _SIGN_BIT else bits | _SIGN_BIT
        return _U64.pack(bits)

    def deserialize(self, data: bytes) -> float:
        (bits,) = _U64.unpack(data)
        bits = bits & ~_SIGN_BIT if bits & _SIGN_BIT else ~bits & _MASK
        return float(struct.unpack(">d", _U64.pack(bits))[0])


class JsonSerde(Serde[Any]):
    """Any JSON value as compact UTF-8 JSON. Not order-preserving: do not range over JSON keys.

    The bytes are exactly those of the standard library's encoder with compact separators,
    `ensure_ascii=False` and `allow_nan=False`, and its errors are the errors; values read
    back are exactly its decoder's. With `iqstate-speedups` built, one C call writes the
    bytes of plain JSON values (`compiled=False` turns it off); without it msgspec writes
    them and its output is used only where it is certainly the standard library's. Bytes
    msgspec refuses to read (NaN, 1E400, lone surrogates, malformed input) are read by
    the standard library, which gives its answer or its error. Measured in
    bench/json_serde.py.
    """

    name = "json"
    order_preserving = False

    _encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    _decoder = json.JSONDecoder()

    _compiled = True
    _writer: _JsonWriter | None = None  # a subclass skipping `__init__` takes msgspec's path

    def __init__(self, *, compiled: bool = True) -> None:
        self._compiled = compiled
        self._writer = _COMPILED_WRITER if compiled else None

    def __getstate__(self) -> dict[str, bool]:
        # Pickled as the choice, not the C module: where it is unpickled (a Spark
        # executor) the writer is looked up again, or the Python path taken without it.
        return {"compiled": self._compiled}

    def __setstate__(self, state: dict[str, bool]) -> None:
        self._compiled = state["compiled"]
        self._writer = _COMPILED_WRITER if self._compiled else None

    def serialize(self, value: Any) -> bytes:
        if self._writer is not None:
            data = self._writer.encode(value)
            return self._stdlib_bytes(value) if data is None else data
        # msgspec's bytes when they are certainly the standard library's: reading them back
        # must give an equal value, which rules out what msgspec writes but the standard
        # library refuses or writes differently (bytes, sets, UUIDs, enums, decimals,
        # dates, dataclasses, NaN and infinities written as null, non-string keys,
        # tuples), with every float written as the standard library writes it.
        try:
            fast = _msgspec_encode(value)
            if _msgspec_read_back(fast) == value:
                return fast
        except Exception:
            pass  # the standard library decides: its bytes or its error
        return self._stdlib_bytes(value)

    def _stdlib_bytes(self, value: Any) -> bytes:
        try:
            return self._encoder.encode(value).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise self._refuse(value, str(exc)) from exc

    def deserialize(self, data: bytes) -> Any:
        try:
            return _msgspec_decode(data)
        except Exception:
            return self._decoder.decode(bytes(data).decode("utf-8"))

    def serialize_many(self, values: list[Any]) -> list[bytes]:
        # As `serialize`: the compiled writer's bytes, the standard library's where it
        # declines; or msgspec's, checked once over the whole list, and if anything fails
        # that check each value encoded as `serialize` encodes it (its bytes or its error).
        if self._writer is not None:
            if type(values) is not list:
                values = list(values)  # the C writer takes exactly a list
            written = self._writer.encode_many(values)
            if None not in written:
                return written  # type: ignore[return-value]  # no None in it
            return [
                self._stdlib_bytes(value) if data is None else data
                for value, data in zip(values, written, strict=True)
            ]
        try:
            fast = list(map(_msgspec_encode, values))
            if list(map(_msgspec_read_back, fast)) == values:
                return fast
        except Exception:
            pass
        return list(map(self.serialize, values))

    def deserialize_many(self, data: list[bytes]) -> list[Any]:
        return list(map(_msgspec_decode, data))


class _JsonWriter(Protocol):
    """`iqstate_speedups.json_writer`: the standard library's bytes, or `None` where it
    must decide (a type other than plain JSON's, NaN, a lone surrogate...)."""

    def encode(self, value: Any, /) -> bytes | None: ...

    def encode_many(self, values: list[Any], /) -> list[bytes | None]: ...


def _compiled_json_writer() -> _JsonWriter | None:
    """The compiled writer where `iqstate-speedups` is installed and built, else `None`."""
    try:
        from iqstate_speedups import json_writer
    except ImportError:
        return None
    return json_writer


def _refuse_in_msgspec(value: object) -> Any:
    raise TypeError(type(value).__name__)


class _WrittenDifferently(Exception):
    """msgspec wrote a float as the standard library would not."""


def _float_as_the_stdlib_writes(text: str) -> float:
    """A float read back from msgspec's output, refused unless the standard library
    writes it the same (it writes `float.__repr__`: `1e+16` and `1e-07` where msgspec
    writes `1e16` and `1e-7`, `1e-05` where msgspec writes `0.00001`)."""
    value = float(text)
    if float.__repr__(value) != text:
        raise _WrittenDifferently(text)
    return value


_msgspec_encode = msgspec.json.Encoder(enc_hook=_refuse_in_msgspec).encode
_msgspec_decode = msgspec.json.Decoder().decode
_msgspec_read_back = msgspec.json.Decoder(float_hook=_float_as_the_stdlib_writes).decode
_COMPILED_WRITER = _compiled_json_writer()


class Serdes:
    """Factories for the built-in serdes (plugins add more through `iqstate_register_serdes`)."""

    _string: ClassVar[StringSerde] = StringSerde()
    _bytes: ClassVar[BytesSerde] = BytesSerde()
    _int64: ClassVar[Int64Serde] = Int64Serde()
    _float64: ClassVar[Float64Serde] = Float64Serde()
    _json: ClassVar[JsonSerde] = JsonSerde()

    @classmethod
    def string(cls) -> StringSerde:
        return cls._string

    @classmethod
    def bytes(cls) -> BytesSerde:
        return cls._bytes

    @classmethod
    def int64(cls) -> Int64Serde:
        return cls._int64

    @classmethod
    def float64(cls) -> Float64Serde:
        return cls._float64

    @classmethod
    def json(cls) -> JsonSerde:
        return cls._json


BUILTIN_SERDES: dict[str, Serde[Any]] = {
    serde.name: serde
    for serde in (Serdes.string(), Serdes.bytes(), Serdes.int64(), Serdes.float64(), Serdes.json())
}


def serde_name(serde: object) -> str:
    return str(getattr(serde, "name", type(serde).__name__))


def encoding_error(
    store: str, serde: object, value: object, what: str, cause: BaseException
) -> SerializationError:
    """The error for a key or value a store's serde cannot encode: names store, serde and type."""
    reason = cause.__cause__ if isinstance(cause, SerializationError) else cause
    detail = "" if reason is None else f" ({type(reason).__name__}: {reason})"
    return SerializationError(
        f"store {store!r}: serde {serde_name(serde)} cannot encode the {what} "
        f"{value!r:.80} of type {type(value).__name__}{detail}"
    )


def decoding_error(
    store: str, serde: object, data: bytes, what: str, cause: BaseException
) -> SerializationError:
    """The error for stored bytes a store's serde cannot decode (a corrupt or foreign store)."""
    return SerializationError(
        f"store {store!r}: serde {serde_name(serde)} cannot decode the stored "
        f"{what} {bytes(data)[:40]!r}: {type(cause).__name__}: {cause}"
    )
