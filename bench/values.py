"""Realistic bench data: 16-character keys and distinct JSON values of about 100 bytes.

Two kinds of values, because compression decides how many blocks a database has:

* `json`: pipeline-output records (a user id, counters, a score, a region, a flag, a
  timestamp), each different, about 100 bytes; LZ4 stores them in about half;
* `random`: JSON strings of 96 random base64 characters (98 bytes), which LZ4 cannot shrink.
"""

from __future__ import annotations

import base64
import random
from typing import Any

from iqstate import Serdes

KINDS = ("json", "random")
REGIONS = ("eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-south-1")


def records(size: int, kind: str, rng: random.Random) -> list[tuple[str, Any]]:
    """`size` distinct 16-character keys (hexadecimal, random order) with values of `kind`."""
    if kind not in KINDS:
        raise ValueError(f"value kind must be one of {KINDS}, got {kind!r}")
    keys = list({f"{rng.getrandbits(64):016x}": None for _ in range(size)})
    while len(keys) < size:  # a 64-bit collision: practically never
        keys.append(f"{rng.getrandbits(64):016x}")
    if kind == "random":
        return [(key, base64.b64encode(rng.randbytes(72)).decode()) for key in keys]
    return [
        (
            key,
            {
                "user": f"u-{rng.randrange(10**10):010d}",
                "clicks": rng.randrange(100_000),
                "spend": round(rng.random() * 1000, 2),
                "region": rng.choice(REGIONS),
                "active": rng.random() < 0.5,
                "seen": 1_700_000_000_000 + rng.randrange(10**10),
            },
        )
        for key in keys
    ]


def encoded(pairs: list[tuple[str, Any]]) -> list[tuple[bytes, bytes]]:
    """The bytes iqstate stores for `pairs` with `key_serde="string"`, `value_serde="json"`."""
    key, value = Serdes.string(), Serdes.json()
    return [(key.serialize(k), value.serialize(v)) for k, v in pairs]


def dataset(size: int, kind: str, rng: random.Random) -> list[tuple[bytes, bytes]]:
    """`records` as the bytes a store holds."""
    return encoded(records(size, kind, rng))
