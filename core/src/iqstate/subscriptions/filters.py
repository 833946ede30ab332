"""Which keys a subscription follows: one key, a range, a prefix, or all of them.

Bounds are compared as the store orders keys: serialized, byte by byte (what a
`RangeQuery` or `prefix_scan` of the store returns), so a filter is checked on the
encoded key without decoding it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from iqstate.errors import SerializationError
from iqstate.runtime.spec import StoreSpec


@dataclass(frozen=True)
class KeyFilter:
    """A subscription's keys, serialized with the store's key serde."""

    key: bytes | None = None
    lower: bytes | None = None
    upper: bytes | None = None
    prefix: bytes | None = None
    partition: int | None = None
    """The only partition that can hold the keys (a key filter), or None."""

    @classmethod
    def build(cls, spec: StoreSpec, key: Any, lower: Any, upper: Any, prefix: Any) -> KeyFilter:
        """The filter of `app.subscribe`'s arguments; an error naming a bad combination or
        a key the store's key serde refuses."""
        if key is not None and (lower is not None or upper is not None or prefix is not None):
            raise ValueError(
                f"subscribe to store {spec.name!r}: key= follows one key; it cannot be "
                "combined with lower=, upper= or prefix="
            )
        if prefix is not None and (lower is not None or upper is not None):
            raise ValueError(
                f"subscribe to store {spec.name!r}: prefix= cannot be combined with lower= "
                "or upper="
            )
        if key is not None:
            key_bytes = _encoded(spec, key, "key")
            return cls(key=key_bytes, partition=spec.partition_of(key, key_bytes))
        return cls(
            lower=None if lower is None else _encoded(spec, lower, "lower"),
            upper=None if upper is None else _encoded(spec, upper, "upper"),
            prefix=None if prefix is None else _encoded(spec, prefix, "prefix"),
        )

    def matches(self, key: bytes) -> bool:
        if self.key is not None:
            return key == self.key
        if self.prefix is not None:
            return key.startswith(self.prefix)
        return (self.lower is None or key >= self.lower) and (
            self.upper is None or key <= self.upper
        )

    @property
    def everything(self) -> bool:
        return (
            self.key is None and self.lower is None and self.upper is None and (self.prefix is None)
        )

    @property
    def identity(self) -> str:
        """A short digest naming the filter, kept in cursors: a cursor resumes only the
        filter it was issued for (what it skipped was judged by that filter)."""
        digest = hashlib.sha256()
        for part in (self.key, self.lower, self.upper, self.prefix):
            digest.update(b"-" if part is None else b"+%d:" % len(part) + part)
        return digest.hexdigest()[:16]


def _encoded(spec: StoreSpec, value: Any, label: str) -> bytes:
    try:
        return spec.key_serde.serialize(value)
    except Exception as error:
        raise SerializationError(
            f"subscribe to store {spec.name!r}: {label}={value!r} is not a key its key serde "
            f"({getattr(spec.key_serde, 'name', type(spec.key_serde).__name__)}) "
            f"encodes: {error}"
        ) from error
