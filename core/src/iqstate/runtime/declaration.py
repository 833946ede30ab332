"""What every store declaration checks and resolves, wherever it is made.

An `Application` declares the stores it hosts; a writer that hosts nothing (the distributed
Spark sink's `ClusterStores`) declares the stores it writes. The two must agree on names,
partitions, serdes and partitioner, so both go through `declare_store`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from iqstate.plugins import PluginRegistry
from iqstate.runtime.names import check_name, check_positive_int
from iqstate.runtime.partitioner import Partitioner
from iqstate.serdes import Serde, Serdes


@dataclass(frozen=True)
class StoreDeclaration:
    """A checked store's resolved serdes (string keys and JSON values by default)."""

    key_serde: Serde[Any]
    value_serde: Serde[Any]


def declare_store(
    declared: Collection[str],
    name: str,
    partitions: int,
    key_serde: Serde[Any] | str | None,
    value_serde: Serde[Any] | str | None,
    partitioner: Partitioner | None,
    plugins: PluginRegistry,
) -> StoreDeclaration:
    """Check a new store against those `declared` already; `TypeError` or `ValueError`
    naming what is wrong."""
    check_name("store", name)
    if name in declared:
        raise ValueError(f"store {name!r} is declared twice")
    check_positive_int(f"store {name!r}: partitions", partitions)
    if partitioner is not None and not callable(partitioner):
        raise TypeError(f"store {name!r}: partitioner must be callable(key, partitions)")
    return StoreDeclaration(
        plugins.serde(key_serde or Serdes.string(), store=name),
        plugins.serde(value_serde or Serdes.json(), store=name),
    )
