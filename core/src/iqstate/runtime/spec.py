"""What the application declares about a store, and how it builds a partition's chain."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from iqstate.engine import Engine
from iqstate.layers import MeteredKeyValueStore, MeteredWindowStore
from iqstate.layers.chain import build_key_value_chain, build_window_chain
from iqstate.runtime.partitioner import Partitioner, murmur2_partitioner
from iqstate.serdes import Serde

StoreType = Literal["key_value", "window"]


@dataclass(frozen=True)
class StoreSpec:
    """A declared store: name, partitions, engine, serdes and layer options."""

    name: str
    store_type: StoreType
    partitions: int
    engine: Engine
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    caching: bool | int = False
    logging: bool = False
    partitioner: Partitioner | None = None
    window_size_ms: int = 0
    retention_ms: int = 0
    config: Mapping[str, Any] = field(default_factory=dict)

    partition_of: Callable[[Any, bytes], int] = field(init=False, repr=False, compare=False)
    """`partition_of(key, key_bytes)`: the custom partitioner's choice, or murmur2's."""

    def __post_init__(self) -> None:
        # Chosen once: this runs for every key of every batch and key query.
        object.__setattr__(self, "partition_of", self._choose_partition_of())

    def _choose_partition_of(self) -> Callable[[Any, bytes], int]:
        partitions, partitioner = self.partitions, self.partitioner
        if partitions == 1:
            return lambda key, key_bytes: 0
        if partitioner is None:
            return murmur2_partitioner(partitions)
        return lambda key, key_bytes: checked_partition(partitioner(key, partitions), self)

    def build(self) -> MeteredKeyValueStore[Any, Any] | MeteredWindowStore[Any, Any]:
        """A fresh, uninitialised chain for one partition."""
        if self.store_type == "window":
            factory = self.engine.window_store
            assert factory is not None  # checked when the store was declared
            return build_window_chain(
                factory(self.name, self.window_size_ms, self.retention_ms),
                self.key_serde,
                self.value_serde,
                logging=self.logging,
            )
        return build_key_value_chain(
            self.engine.key_value_store(self.name),
            self.key_serde,
            self.value_serde,
            caching=self.caching,
            logging=self.logging,
        )

    def describe(self) -> dict[str, Any]:
        """What is recorded on disk to recognise the store on the next start."""
        return {
            "store_type": self.store_type,
            "partitions": self.partitions,
            "engine": self.engine.name,
            "key_serde": getattr(self.key_serde, "name", type(self.key_serde).__name__),
            "value_serde": getattr(self.value_serde, "name", type(self.value_serde).__name__),
        }


def checked_partition(chosen: object, spec: StoreSpec) -> int:
    """A partitioner's answer, which must be exactly one partition number in range."""
    if not isinstance(chosen, int) or isinstance(chosen, bool):
        picked = list(chosen) if isinstance(chosen, set | frozenset | list | tuple) else None
        if picked is None or len(picked) != 1:
            raise ValueError(
                f"the partitioner of store {spec.name!r} must return one partition, got {chosen!r}"
            )
        chosen = picked[0]
    if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < spec.partitions:
        raise ValueError(
            f"the partitioner of store {spec.name!r} returned {chosen!r}; the store has "
            f"partitions 0..{spec.partitions - 1}"
        )
    return chosen
