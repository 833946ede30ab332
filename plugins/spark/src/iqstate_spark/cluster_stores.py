"""`ClusterStores`: the stores of a distributed application, as a Spark pipeline writes them.

A pipeline in distributed mode hosts no store: it writes the changelog topics that the
serving instances follow. What it needs to know of each store is what decides the records:
its name (the topic), its partitions, its serdes and its partitioner. They must be declared
exactly as the serving instances declare them (`iqstate serve --cluster ... --store ...` or
`Application.key_value_store`): keys default to strings and values to JSON there as here.

    stores = ClusterStores(KafkaCluster("broker:9092"), "word-app")
    stores.key_value_store("word-counts", 4)
    df.writeStream.foreachBatch(iqstate_spark.to_store(stores, "word-counts", key="word"))

A `ChangelogStore` is a small picklable value: Spark ships it to every executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from iqstate.plugins import default_registry
from iqstate.runtime.declaration import declare_store
from iqstate.runtime.names import check_name
from iqstate.runtime.partitioner import Partitioner, PartitionFunction, partition_function
from iqstate.serdes import Serde

if TYPE_CHECKING:
    from collections.abc import Mapping

    from iqstate_kafka.cluster import KafkaCluster

StoreKind = Literal["key_value", "window"]


@dataclass(frozen=True)
class ChangelogStore:
    """One store as its writers see it: name, partitions, serdes, partitioner."""

    name: str
    partitions: int
    store_type: StoreKind
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    partitioner: Partitioner | None = field(default=None, compare=False)

    partition_of: PartitionFunction = field(init=False, repr=False, compare=False)
    """`partition_of(key, key_bytes)`: the store's partitioning rule (`partition_function`),
    the same as the serving instances'."""

    def __post_init__(self) -> None:
        # Chosen once: a writer calls it for every row.
        object.__setattr__(
            self, "partition_of", partition_function(self.name, self.partitions, self.partitioner)
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped as its declaration; the partition function is chosen again where it lands.
        declared = (self.name, self.partitions, self.store_type, self.key_serde, self.value_serde)
        return (ChangelogStore, (*declared, self.partitioner))


class ClusterStores:
    """The stores of application `application_id` on `cluster`, declared for writing."""

    def __init__(self, cluster: KafkaCluster, application_id: str) -> None:
        self.cluster = cluster
        self.application_id = check_name("application", application_id)
        self._stores: dict[str, ChangelogStore] = {}

    def key_value_store(
        self,
        name: str,
        partitions: int,
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        partitioner: Partitioner | None = None,
    ) -> ChangelogStore:
        """Declare a key-value store (keys default to strings, values to JSON)."""
        return self._declare(name, partitions, "key_value", key_serde, value_serde, partitioner)

    def window_store(
        self,
        name: str,
        partitions: int,
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        partitioner: Partitioner | None = None,
    ) -> ChangelogStore:
        """Declare a window store (its window size and retention matter to the serving
        instances only: a writer writes each window's start)."""
        return self._declare(name, partitions, "window", key_serde, value_serde, partitioner)

    @property
    def stores(self) -> Mapping[str, ChangelogStore]:
        """The declared stores by name."""
        return MappingProxyType(self._stores)

    def _declare(
        self,
        name: str,
        partitions: int,
        store_type: StoreKind,
        key_serde: Serde[Any] | str | None,
        value_serde: Serde[Any] | str | None,
        partitioner: Partitioner | None,
    ) -> ChangelogStore:
        declared = declare_store(
            self._stores.keys(),
            name,
            partitions,
            key_serde,
            value_serde,
            partitioner,
            default_registry(),
        )
        store = ChangelogStore(
            name,
            partitions,
            store_type,
            declared.key_serde,
            declared.value_serde,
            partitioner,
        )
        self._stores[name] = store
        return store
