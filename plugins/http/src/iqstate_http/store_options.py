"""`--store` options of `iqstate serve`: a store declared on the command line.

    NAME:key_value:PARTITIONS[,option=value...]
    NAME:window:PARTITIONS,window_size_ms=MS,retention_ms=MS[,option=value...]
    NAME:timestamped_key_value:PARTITIONS[,option=value...]
    NAME:versioned_key_value:PARTITIONS,history_retention_ms=MS[,option=value...]
    NAME:session:PARTITIONS,retention_ms=MS[,option=value...]
    NAME:global_key_value[:1][,option=value...]

Options are the keyword arguments of the `Application` method declaring that type of store
(`key_value_store`, `window_store`, ...) that a command line can carry: `engine`,
`key_serde`, `value_serde` (serde names), `caching` (key-value, timestamped and global
stores: true/false or a size), `window_size_ms`, `retention_ms`, `history_retention_ms`.
A global store has one partition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from iqstate import Application
from iqstate_http.client_numbers import INT32_MAX, whole_number

_COMMON = frozenset({"engine", "key_serde", "value_serde"})
_MS = frozenset({"window_size_ms", "retention_ms", "history_retention_ms"})


@dataclass(frozen=True)
class _StoreType:
    """How one type of store is declared: the `Application` method, its options, the ones
    it needs, and whether it takes a number of partitions."""

    declare: Callable[..., Any]
    options: frozenset[str]
    required: tuple[str, ...] = ()
    partitioned: bool = True


_STORE_TYPES = {
    "key_value": _StoreType(Application.key_value_store, _COMMON | {"caching"}),
    "window": _StoreType(
        Application.window_store,
        _COMMON | {"window_size_ms", "retention_ms"},
        ("window_size_ms", "retention_ms"),
    ),
    "timestamped_key_value": _StoreType(
        Application.timestamped_key_value_store, _COMMON | {"caching"}
    ),
    "versioned_key_value": _StoreType(
        Application.versioned_key_value_store,
        _COMMON | {"history_retention_ms"},
        ("history_retention_ms",),
    ),
    "session": _StoreType(Application.session_store, _COMMON | {"retention_ms"}, ("retention_ms",)),
    "global_key_value": _StoreType(
        Application.global_key_value_store, _COMMON | {"caching"}, partitioned=False
    ),
}


class StoreOptionError(ValueError):
    """A `--store` value that does not declare a store; the message says what is wrong."""


@dataclass(frozen=True)
class StoreOption:
    """One parsed `--store` value."""

    name: str
    store_type: str
    partitions: int
    options: dict[str, Any] = field(default_factory=dict)

    def declare(self, app: Application) -> None:
        kind = _STORE_TYPES[self.store_type]
        if kind.partitioned:
            kind.declare(app, self.name, self.partitions, **self.options)
        else:
            kind.declare(app, self.name, **self.options)


def parse_store(text: str) -> StoreOption:
    """Parse one `--store` value (see the module docstring)."""
    head, _, tail = text.partition(",")
    parts = head.split(":")
    if parts[1:2] == ["global_key_value"] and len(parts) == 2:
        parts.append("1")
    if len(parts) != 3:
        raise StoreOptionError(
            f"--store {text!r}: expected NAME:key_value:PARTITIONS, NAME:window:PARTITIONS "
            "(or another store type), then ,option=value pairs"
        )
    name, store_type, count = parts
    kind = _STORE_TYPES.get(store_type)
    if kind is None:
        raise StoreOptionError(
            f"--store {text!r}: the type must be key_value or window, or one of "
            f"timestamped_key_value, versioned_key_value, session, global_key_value; got "
            f"{store_type!r}"
        )
    partitions = whole_number(count, INT32_MAX)
    if partitions is None or partitions < 1:
        raise StoreOptionError(
            f"--store {text!r}: partitions must be a number from 1 to {INT32_MAX}, got {count!r}"
        )
    if not kind.partitioned and partitions != 1:
        raise StoreOptionError(f"--store {text!r}: a {store_type} store has one partition")
    options: dict[str, Any] = {}
    for pair in filter(None, tail.split(",")):
        key, equals, value = pair.partition("=")
        if not equals or key not in kind.options:
            raise StoreOptionError(
                f"--store {text!r}: {pair!r} is not an option of a {store_type} store; "
                f"options: {', '.join(sorted(kind.options))}"
            )
        options[key] = _value(text, key, value)
    if not set(kind.required) <= set(options):
        raise StoreOptionError(
            f"--store {text!r}: a {store_type} store needs {' and '.join(kind.required)}"
        )
    return StoreOption(name, store_type, partitions, options)


def _value(text: str, key: str, value: str) -> Any:
    if key in _MS:
        if (ms := whole_number(value)) is None:
            raise StoreOptionError(f"--store {text!r}: {key} must be a number of ms, got {value!r}")
        return ms
    if key == "caching":
        if value in ("true", "false"):
            return value == "true"
        if (size := whole_number(value)) is None:
            raise StoreOptionError(
                f"--store {text!r}: caching must be true, false or a size, got {value!r}"
            )
        return size
    return value
