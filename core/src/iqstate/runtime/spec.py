"""What the application declares about a store, and how it builds a partition's chain.

Key-value and window stores are two types of declaration: each knows the chain it
builds, the entry a batch writes for it, and how it is described on disk.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NamedTuple

from iqstate.engine import Engine
from iqstate.layers.chain import (
    StoreChain,
    key_value_chain,
    session_chain,
    versioned_chain,
    window_chain,
)
from iqstate.lazy import resolved
from iqstate.queries import KeyQuery, VersionedKeyQuery
from iqstate.runtime.partitioner import Partitioner, PartitionFunction, partition_function
from iqstate.serdes import Serde
from iqstate.session_store import check_session, encode_session_key, session_store_factory
from iqstate.times import stored_ms
from iqstate.timestamped import check_timestamp, stamped
from iqstate.versioned_store import (
    decode_version_record,
    encode_version_record,
    versioned_store_factory,
)


class PutExtras(NamedTuple):
    """What a put names besides its key and value; each store type needs one or none."""

    window_start: Any = None
    timestamp: Any = None
    session: Any = None


NO_EXTRAS = PutExtras()
"""A put naming nothing besides its key and value (a key-value store's: the common one)."""

StoreType = Literal[
    "key_value",
    "window",
    "timestamped_key_value",
    "versioned_key_value",
    "session",
    "global_key_value",
]


@dataclass(frozen=True)
class StoreSpec(ABC):
    """A declared store: name, partitions, engine, serdes and layer options."""

    store_type: ClassVar[StoreType]
    """How the store's type is named on disk, in metadata and in the HTTP API."""
    key_lookups: ClassVar[frozenset[type]]
    """The query types about one key that take the chain's `key_lookup` (the key
    serialized once, only its partition asked): the hot path of a store type."""

    name: str
    partitions: int
    engine: Engine
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    logging: bool = False
    partitioner: Partitioner | None = None
    config: Mapping[str, Any] = field(default_factory=dict)

    partition_of: PartitionFunction = field(init=False, repr=False, compare=False)
    """`partition_of(key, key_bytes)`: the store's partitioning rule (`partition_function`)."""
    store_factory: Callable[..., Any] = field(init=False, repr=False, compare=False)
    """The engine's factory for this type of store, loaded when the store is declared."""
    quick_key_serializer: Callable[[Any], bytes] = field(init=False, repr=False, compare=False)
    """The key serde's `quick_serializer()`: a key query's key bytes, or any exception
    where `key_serde.serialize` would refuse the key."""
    key_sizes: tuple[int, int] | None = field(init=False, repr=False, compare=False)
    """The shortest and longest serialized key the engine keeps in this type of store
    (`Engine.key_sizes` less this type's `key_overhead`); None when any."""

    def __post_init__(self) -> None:
        # Chosen once: these run for every key of every batch and key query.
        object.__setattr__(
            self, "partition_of", partition_function(self.name, self.partitions, self.partitioner)
        )
        object.__setattr__(self, "quick_key_serializer", self.key_serde.quick_serializer())
        sizes = self.engine.key_sizes
        if sizes is not None:
            sizes = (max(0, sizes[0] - self.key_overhead), sizes[1] - self.key_overhead)
        object.__setattr__(self, "key_sizes", sizes)
        # An engine registered by import path is imported here, when a store of it is
        # declared: a missing library fails at the declaration, naming plugin and engine.
        object.__setattr__(self, "store_factory", resolved(self._engine_factory()))

    def create_store(self, *parameters: Any) -> Any:
        """The engine's store for one partition of this store; an error the engine raises
        (a store name it refuses, say) says which store and engine it came from."""
        try:
            return self.store_factory(self.name, *parameters)
        except Exception as exc:
            engine = self.engine
            plugin = f" of plugin {engine.plugin!r}" if engine.plugin else ""
            exc.add_note(
                f"store {self.name!r}: engine {engine.name!r}{plugin} refused to create it"
            )
            raise

    @abstractmethod
    def _engine_factory(self) -> Callable[..., Any]:
        """The engine's factory (or the import path standing for it) for this store type."""

    @abstractmethod
    def build(self) -> StoreChain[Any]:
        """A fresh, uninitialised chain for one partition."""

    bulk_pairs: ClassVar[bool] = False
    """Whether a batch's `put_all` of `(key, value)` pairs writes this store as they are."""

    checks_records: ClassVar[bool] = False
    """Whether a changelog record can fail to decode for this type of store (its key or
    value carries a time, a flag): then `record_problem` says why one does."""

    key_overhead: ClassVar[int] = 0
    """The most bytes this type's layout adds to a key in the engine's key-value store
    (`Engine.key_sizes`)."""
    record_key_extra: ClassVar[int] = 0
    """The bytes a changelog record's key has after the key (a window's start, a session's
    bounds, a version's timestamp)."""

    def record_problem(self, key: bytes, value: bytes | None) -> str | None:
        """Why a changelog record of this store does not decode (None: it does)."""
        return None

    def key_size_problem(self, size: int) -> str | None:
        """Why a serialized key of `size` bytes cannot be kept on this store's engine (None:
        it can)."""
        sizes = self.key_sizes
        if sizes is None or sizes[0] <= size <= sizes[1]:
            return None
        return (
            f"store {self.name!r}: a key of {size} bytes, which engine {self.engine.name!r} "
            f"cannot keep in a {self.store_type} store (keys of {sizes[0]} to {sizes[1]} "
            "bytes, serialized); use another engine (rocksdb, sqlite) or shorter keys"
        )

    @property
    def record_check(self) -> Callable[[bytes, bytes | None], str | None] | None:
        """Why a changelog record of this store cannot be applied (None: it can): it does
        not decode, or its key is of a size the engine cannot keep. None when every record
        can."""
        if self.key_sizes is None:
            return self.record_problem if self.checks_records else None
        return self._checked_record

    def _checked_record(self, key: bytes, value: bytes | None) -> str | None:
        problem = self.record_problem(key, value) if self.checks_records else None
        return problem or self.key_size_problem(len(key) - self.record_key_extra)

    @abstractmethod
    def entry(self, key_bytes: bytes, value_bytes: bytes | None, put: PutExtras) -> Any:
        """The serialized entry a batch writes for one put (a `None` value: a delete),
        checking that the put names what this type of store needs and nothing else."""

    def _refuse_extras(self, allowed: str, put: PutExtras) -> None:
        if put is NO_EXTRAS:
            return
        for name, value in zip(put._fields, put, strict=True):
            if value is not None and name != allowed:
                raise TypeError(
                    f"store {self.name!r} is a {self.store_type} store: {name} is not allowed"
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


@dataclass(frozen=True)
class KeyValueStoreSpec(StoreSpec):
    """A key-value store; `caching` adds a write buffer (`True`, or its size in entries)."""

    store_type: ClassVar[StoreType] = "key_value"
    key_lookups: ClassVar[frozenset[type]] = frozenset({KeyQuery})
    caching: bool | int = False

    def _engine_factory(self) -> Callable[..., Any]:
        return self.engine.key_value_store

    def build(self) -> StoreChain[Any]:
        return key_value_chain(
            self.create_store(),
            self.key_serde,
            self.value_serde,
            caching=self.caching,
            logging=self.logging,
        )

    bulk_pairs: ClassVar[bool] = True

    def entry(
        self, key_bytes: bytes, value_bytes: bytes | None, put: PutExtras
    ) -> tuple[bytes, bytes | None]:
        self._refuse_extras("", put)
        return key_bytes, value_bytes


@dataclass(frozen=True)
class WindowStoreSpec(StoreSpec):
    """A window store of fixed-size windows kept for `retention_ms`."""

    store_type: ClassVar[StoreType] = "window"
    key_lookups: ClassVar[frozenset[type]] = frozenset()
    checks_records: ClassVar[bool] = True
    key_overhead: ClassVar[int] = 9  # a key space byte and the start (the index by time)
    record_key_extra: ClassVar[int] = 8
    window_size_ms: int = 0
    retention_ms: int = 0

    def record_problem(self, key: bytes, value: bytes | None) -> str | None:
        if len(key) < 8:
            return f"a window store's key needs at least 8 bytes, it has {len(key)}"
        return None

    def _engine_factory(self) -> Callable[..., Any]:
        factory = self.engine.window_store
        if factory is None:
            raise ValueError(
                f"store {self.name!r}: engine {self.engine.name!r} has no window stores"
            )
        return factory

    def build(self) -> StoreChain[Any]:
        return window_chain(
            self.create_store(self.window_size_ms, self.retention_ms),
            self.key_serde,
            self.value_serde,
            logging=self.logging,
        )

    def entry(
        self, key_bytes: bytes, value_bytes: bytes | None, put: PutExtras
    ) -> tuple[bytes, int, bytes | None]:
        self._refuse_extras("window_start", put)
        if put.window_start is None:
            raise TypeError(
                f"store {self.name!r} is a window store: put and delete need "
                "window_start=<ms> (an int, or a timezone-aware datetime)"
            )
        # checked here, not at the batch's commit
        window_start = stored_ms(put.window_start, "store {!r}: window_start", self.name)
        return key_bytes, window_start, value_bytes


@dataclass(frozen=True)
class TimestampedKeyValueStoreSpec(KeyValueStoreSpec):
    """A key-value store whose values carry the timestamp they were put with (KIP-992):
    a put needs `timestamp=<ms>`, and a later put overwrites whatever its timestamp."""

    store_type: ClassVar[StoreType] = "timestamped_key_value"
    key_lookups: ClassVar[frozenset[type]] = frozenset()
    bulk_pairs: ClassVar[bool] = False

    def build(self) -> StoreChain[Any]:
        return key_value_chain(
            self.create_store(),
            self.key_serde,
            self.value_serde,
            caching=self.caching,
            logging=self.logging,
            timestamped=True,
        )

    def entry(
        self, key_bytes: bytes, value_bytes: bytes | None, put: PutExtras
    ) -> tuple[bytes, bytes | None]:
        self._refuse_extras("timestamp", put)
        if value_bytes is None:
            return key_bytes, None
        return key_bytes, stamped(check_timestamp(self.name, put.timestamp), value_bytes)


@dataclass(frozen=True)
class GlobalKeyValueStoreSpec(KeyValueStoreSpec):
    """A key-value store of one partition that every instance hosts and answers (Kafka
    Streams' global stores, which IQv2 cannot query there: KAFKA-13523)."""

    store_type: ClassVar[StoreType] = "global_key_value"


@dataclass(frozen=True)
class VersionedKeyValueStoreSpec(StoreSpec):
    """A store of every version of each key by timestamp, for `history_retention_ms`."""

    store_type: ClassVar[StoreType] = "versioned_key_value"
    key_lookups: ClassVar[frozenset[type]] = frozenset({KeyQuery, VersionedKeyQuery})
    checks_records: ClassVar[bool] = True
    key_overhead: ClassVar[int] = 9  # a key space byte and a time (the expiry indexes)
    record_key_extra: ClassVar[int] = 8
    history_retention_ms: int = 0

    def record_problem(self, key: bytes, value: bytes | None) -> str | None:
        try:
            decode_version_record(key, value)
        except ValueError as error:
            return str(error)
        return None

    def _engine_factory(self) -> Callable[..., Any]:
        return versioned_store_factory(self.engine)

    def build(self) -> StoreChain[Any]:
        return versioned_chain(
            self.create_store(self.history_retention_ms),
            self.key_serde,
            self.value_serde,
            logging=self.logging,
        )

    def entry(
        self, key_bytes: bytes, value_bytes: bytes | None, put: PutExtras
    ) -> tuple[bytes, bytes]:
        self._refuse_extras("timestamp", put)
        return encode_version_record(
            key_bytes,
            check_timestamp(self.name, put.timestamp, "a put or delete (a tombstone version)"),
            value_bytes,
        )

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"history_retention_ms": self.history_retention_ms}


@dataclass(frozen=True)
class SessionStoreSpec(StoreSpec):
    """A store of values per key and session, kept for `retention_ms` after a session ends."""

    store_type: ClassVar[StoreType] = "session"
    key_lookups: ClassVar[frozenset[type]] = frozenset()
    checks_records: ClassVar[bool] = True
    key_overhead: ClassVar[int] = 21  # a key space byte, the key's length and both bounds
    record_key_extra: ClassVar[int] = 16
    retention_ms: int = 0

    def record_problem(self, key: bytes, value: bytes | None) -> str | None:
        if len(key) < 16:
            return f"a session store's key needs at least 16 bytes, it has {len(key)}"
        return None

    def _engine_factory(self) -> Callable[..., Any]:
        return session_store_factory(self.engine)

    def build(self) -> StoreChain[Any]:
        return session_chain(
            self.create_store(self.retention_ms),
            self.key_serde,
            self.value_serde,
            logging=self.logging,
        )

    def entry(
        self, key_bytes: bytes, value_bytes: bytes | None, put: PutExtras
    ) -> tuple[bytes, bytes | None]:
        self._refuse_extras("session", put)
        session = put.session
        if not isinstance(session, tuple) or len(session) != 2:
            raise TypeError(
                f"store {self.name!r} is a session store: put and delete need "
                f"session=(start_ms, end_ms), got {session!r}"
            )
        start, end = check_session(self.name, *session)
        return encode_session_key(key_bytes, start, end), value_bytes

    def describe(self) -> dict[str, Any]:
        return super().describe() | {"retention_ms": self.retention_ms}
