"""`--store` options of `iqstate serve`: a store declared on the command line.

    NAME:key_value:PARTITIONS[,option=value...]
    NAME:window:PARTITIONS,window_size_ms=MS,retention_ms=MS[,option=value...]

Options are the keyword arguments of `Application.key_value_store` / `window_store` that a
command line can carry: `engine`, `key_serde`, `value_serde` (serde names), `caching`
(key-value stores: true/false or a size), `window_size_ms`, `retention_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from iqstate import Application

_COMMON = {"engine", "key_serde", "value_serde"}
_OPTIONS = {
    "key_value": _COMMON | {"caching"},
    "window": _COMMON | {"window_size_ms", "retention_ms"},
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
        if self.store_type == "window":
            options = dict(self.options)
            size, retention = options.pop("window_size_ms"), options.pop("retention_ms")
            app.window_store(self.name, self.partitions, size, retention, **options)
        else:
            app.key_value_store(self.name, self.partitions, **self.options)


def parse_store(text: str) -> StoreOption:
    """Parse one `--store` value (see the module docstring)."""
    head, _, tail = text.partition(",")
    parts = head.split(":")
    if len(parts) != 3:
        raise StoreOptionError(
            f"--store {text!r}: expected NAME:key_value:PARTITIONS or NAME:window:PARTITIONS, "
            "then ,option=value pairs"
        )
    name, store_type, count = parts
    if store_type not in _OPTIONS:
        raise StoreOptionError(
            f"--store {text!r}: the type must be key_value or window, got {store_type!r}"
        )
    if not count.isdigit() or int(count) < 1:
        raise StoreOptionError(f"--store {text!r}: partitions must be a number >= 1, got {count!r}")
    options: dict[str, Any] = {}
    for pair in filter(None, tail.split(",")):
        key, equals, value = pair.partition("=")
        if not equals or key not in _OPTIONS[store_type]:
            raise StoreOptionError(
                f"--store {text!r}: {pair!r} is not an option of a {store_type} store; "
                f"options: {', '.join(sorted(_OPTIONS[store_type]))}"
            )
        options[key] = _value(text, key, value)
    if store_type == "window" and not {"window_size_ms", "retention_ms"} <= set(options):
        raise StoreOptionError(
            f"--store {text!r}: a window store needs window_size_ms and retention_ms"
        )
    return StoreOption(name, store_type, int(count), options)


def _value(text: str, key: str, value: str) -> Any:
    if key in ("window_size_ms", "retention_ms"):
        if not value.isdigit():
            raise StoreOptionError(f"--store {text!r}: {key} must be a number of ms, got {value!r}")
        return int(value)
    if key == "caching":
        if value in ("true", "false"):
            return value == "true"
        if not value.isdigit():
            raise StoreOptionError(
                f"--store {text!r}: caching must be true, false or a size, got {value!r}"
            )
        return int(value)
    return value
