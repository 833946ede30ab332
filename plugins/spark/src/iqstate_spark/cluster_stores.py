"""`ClusterStores`: the stores of a distributed application, as a Spark pipeline writes them.

A pipeline in distributed mode hosts no store: it writes the changelog topics that the
serving instances follow. What it needs to know of each store is what decides the records:
its name (the topic), its type, its partitions, its serdes and its partitioner. They must be
declared exactly as the serving instances declare them (`iqstate serve --cluster ... --store
...` or `Application.key_value_store` and its siblings): keys default to strings and values
to JSON there as here. What matters to the serving instances only (engines, window sizes,
retention) is not declared here.

    stores = ClusterStores(KafkaCluster("broker:9092"), "word-app")
    stores.key_value_store("word-counts", 4)
    df.writeStream.foreachBatch(iqstate_spark.to_store(stores, "word-counts", key="word"))

A `ChangelogStore` is a small picklable value: Spark ships it to every executor. Its
`entry_of` makes a row's changelog record by the core's own encoding for the store's type
(the functions `StoreSpec.entry` uses), so writers and replicas agree byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from iqstate.plugins import default_registry
from iqstate.runtime.declaration import declare_store
from iqstate.runtime.names import check_name
from iqstate.runtime.partitioner import Partitioner, PartitionFunction, partition_function
from iqstate.runtime.spec import StoreType
from iqstate.serdes import Serde
from iqstate.session_store import check_session, encode_session_key
from iqstate.timestamped import stamped
from iqstate.versioned_store import encode_version_record

if TYPE_CHECKING:
    from collections.abc import Mapping

    from iqstate_kafka.cluster import KafkaCluster

EntryFunction = Callable[[bytes, bytes | None, Any], tuple[Any, ...]]
"""`entry_of(key_bytes, value_bytes, time)`: one row's changelog entry (a `None` value
deletes), `time` being what `RowColumns.times` gives the row."""


def _key_value_entry(key: bytes, value: bytes | None, _: Any) -> tuple[bytes, bytes | None]:
    return key, value


def _window_entry(key: bytes, value: bytes | None, start: int) -> tuple[bytes, int, bytes | None]:
    return key, start, value


def _timestamped_entry(
    key: bytes, value: bytes | None, timestamp: int
) -> tuple[bytes, bytes | None]:
    return key, None if value is None else stamped(timestamp, value)


def _versioned_entry(key: bytes, value: bytes | None, timestamp: int) -> tuple[bytes, bytes]:
    return encode_version_record(key, timestamp, value)


def _session_entry(
    name: str, key: bytes, value: bytes | None, session: tuple[int, int]
) -> tuple[bytes, bytes | None]:
    start, end = check_session(name, *session)
    return encode_session_key(key, start, end), value


_ENTRIES: dict[StoreType, EntryFunction] = {
    "key_value": _key_value_entry,
    "global_key_value": _key_value_entry,
    "window": _window_entry,
    "timestamped_key_value": _timestamped_entry,
    "versioned_key_value": _versioned_entry,
}


@dataclass(frozen=True)
class ChangelogStore:
    """One store as its writers see it: name, type, partitions, serdes, partitioner."""

    name: str
    partitions: int
    store_type: StoreType
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    partitioner: Partitioner | None = field(default=None, compare=False)

    partition_of: PartitionFunction = field(init=False, repr=False, compare=False)
    """`partition_of(key, key_bytes)`: the store's partitioning rule (`partition_function`),
    the same as the serving instances'."""
    entry_of: EntryFunction = field(init=False, repr=False, compare=False)
    """`entry_of(key_bytes, value_bytes, time)`: the changelog entry of one row (see
    `EntryFunction`), in the core's encoding for the store's type."""

    def __post_init__(self) -> None:
        # Chosen once: a writer calls them for every row.
        object.__setattr__(
            self, "partition_of", partition_function(self.name, self.partitions, self.partitioner)
        )
        entry_of = (
            partial(_session_entry, self.name)
            if self.store_type == "session"
            else _ENTRIES[self.store_type]
        )
        object.__setattr__(self, "entry_of", entry_of)

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

    def timestamped_key_value_store(
        self,
        name: str,
        partitions: int,
        *,
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        partitioner: Partitioner | None = None,
    ) -> ChangelogStore:
        """Declare a timestamped key-value store (each value written with its timestamp)."""
        return self._declare(
            name, partitions, "timestamped_key_value", key_serde, value_serde, partitioner
        )

    def versioned_key_value_store(
        self,
        name: str,
        partitions: int,
        *,
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        partitioner: Partitioner | None = None,
    ) -> ChangelogStore:
        """Declare a versioned key-value store (its history retention matters to the
        serving instances only: a writer writes every version)."""
        return self._declare(
            name, partitions, "versioned_key_value", key_serde, value_serde, partitioner
        )

    def session_store(
        self,
        name: str,
        partitions: int,
        *,
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        partitioner: Partitioner | None = None,
    ) -> ChangelogStore:
        """Declare a session store (its retention matters to the serving instances only: a
        writer writes every session)."""
        return self._declare(name, partitions, "session", key_serde, value_serde, partitioner)

    def global_key_value_store(
        self,
        name: str,
        *,
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
    ) -> ChangelogStore:
        """Declare a global key-value store (one partition, which every serving instance
        follows)."""
        return self._declare(name, 1, "global_key_value", key_serde, value_serde, None)

    @property
    def stores(self) -> Mapping[str, ChangelogStore]:
        """The declared stores by name."""
        return MappingProxyType(self._stores)

    def _declare(
        self,
        name: str,
        partitions: int,
        store_type: StoreType,
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
