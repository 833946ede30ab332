"""`Application`: hosts partitioned stores, applies batches, answers queries and discovery."""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, TypeVar

from iqstate.changelog import ChangelogWriter
from iqstate.context import ProcessingGuarantee
from iqstate.errors import (
    BatchGapError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    StreamsNotStartedError,
    StreamsStoppedError,
    UnknownStateStoreError,
)
from iqstate.plugins import PluginRegistry, default_registry
from iqstate.position import Position, TopicPartition
from iqstate.request import StateQueryRequest
from iqstate.results import StateQueryResult
from iqstate.runtime.assignment import (
    Assignment,
    AssignmentProvider,
    Contact,
    PartitionRole,
    StandaloneAssignment,
)
from iqstate.runtime.batch import Batch, StorePartition
from iqstate.runtime.cluster import ChangelogCounts, Cluster
from iqstate.runtime.committer import BatchCommitter
from iqstate.runtime.declaration import declare_store
from iqstate.runtime.durations import DurationsSnapshot
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.iqv1 import StoreQueryParameters
from iqstate.runtime.metadata import (
    HostInfo,
    InstanceStatus,
    KeyQueryMetadata,
    LagInfo,
    StreamsMetadata,
)
from iqstate.runtime.metadata_state import MetadataState
from iqstate.runtime.names import check_name, check_positive_int
from iqstate.runtime.partitioner import Partitioner
from iqstate.runtime.partitions import HostedPartitions, HostingSettings, changelog_partition
from iqstate.runtime.querying import execute as _execute
from iqstate.runtime.spec import (
    GlobalKeyValueStoreSpec,
    KeyValueStoreSpec,
    SessionStoreSpec,
    StoreSpec,
    TimestampedKeyValueStoreSpec,
    VersionedKeyValueStoreSpec,
    WindowStoreSpec,
)
from iqstate.runtime.state_directory import StateDirectory
from iqstate.serdes import Serde
from iqstate.subscriptions.feed import ChangeBufferSettings
from iqstate.subscriptions.filters import KeyFilter
from iqstate.subscriptions.subscription import DEFAULT_MAX_PENDING, Subscription

T = TypeVar("T")


class AppState(enum.Enum):
    """The lifecycle of an application, as Kafka Streams names it."""

    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"

    @property
    def is_queryable(self) -> bool:
        return self in _QUERYABLE


_QUERYABLE = frozenset({AppState.RUNNING, AppState.REBALANCING})
_RUNNING, _REBALANCING = AppState.RUNNING, AppState.REBALANCING

_TRANSITIONS: dict[AppState, frozenset[AppState]] = {
    AppState.CREATED: frozenset({AppState.REBALANCING, AppState.PENDING_SHUTDOWN}),
    AppState.REBALANCING: frozenset(
        {AppState.RUNNING, AppState.PENDING_SHUTDOWN, AppState.PENDING_ERROR}
    ),
    AppState.RUNNING: frozenset(
        {AppState.REBALANCING, AppState.PENDING_SHUTDOWN, AppState.PENDING_ERROR}
    ),
    AppState.PENDING_SHUTDOWN: frozenset({AppState.NOT_RUNNING}),
    AppState.NOT_RUNNING: frozenset(),
    AppState.PENDING_ERROR: frozenset({AppState.ERROR}),
    AppState.ERROR: frozenset({AppState.PENDING_SHUTDOWN}),
}

_GUARANTEES = ("exactly_once", "at_least_once")


def _check_source_offsets(position: Position) -> None:
    """Refuse a batch's position naming a negative partition or offset: Kafka's start at 0,
    and the HTTP API refuses a position that does not."""
    for topic, offsets in position.to_map().items():
        for partition, offset in offsets.items():
            if partition < 0 or offset < 0:
                raise ValueError(
                    f"a batch's position holds source partitions and offsets from 0 up, got "
                    f"{topic!r} partition {partition} offset {offset}"
                )


class Application:
    """Hosts the partitions of declared stores and makes them queryable (SPEC section 6).

    Declare stores, `start()`, write with `begin_batch()`, read with `query()` (IQv2) or
    `store()` (IQv1), discover with `all_metadata()` / `query_metadata_for_key()`, and
    `close()`; or use the application as a context manager.
    """

    def __init__(
        self,
        application_id: str,
        state_dir: str | Path,
        application_server: str = "localhost:7070",
        num_standby_replicas: int = 0,
        processing_guarantee: ProcessingGuarantee = "exactly_once",
        *,
        assignment: AssignmentProvider | None = None,
        plugins: PluginRegistry | None = None,
        changelog: ChangelogWriter | None = None,
        cluster: Cluster | None = None,
        serving: bool = True,
        change_buffer: ChangeBufferSettings | None = None,
    ) -> None:
        """`change_buffer`: the bounds of each partition's replay buffer for change
        subscriptions (`subscribe`); the defaults are explained in docs/python-api.md."""
        if change_buffer is not None and not isinstance(change_buffer, ChangeBufferSettings):
            raise TypeError(
                f"change_buffer must be a ChangeBufferSettings, got {type(change_buffer).__name__}"
            )
        self.change_buffer = change_buffer or ChangeBufferSettings()
        self.application_id = check_name("application", application_id)
        self.state_dir = Path(state_dir)
        self.host_info = HostInfo.parse(application_server)
        self.num_standby_replicas = check_positive_int(
            "num_standby_replicas", num_standby_replicas, minimum=0
        )
        if processing_guarantee not in _GUARANTEES:
            raise ValueError(
                f"processing_guarantee must be one of {_GUARANTEES}, got {processing_guarantee!r}"
            )
        self.processing_guarantee: ProcessingGuarantee = processing_guarantee
        self._state_directory = StateDirectory(self.state_dir, self.application_id)
        self.directory = self._state_directory.path
        self.plugins = plugins or default_registry()
        """The plugins this application takes engines, serdes and query handlers from."""
        if cluster is not None and (assignment is not None or changelog is not None):
            raise ValueError(
                "an application with a cluster takes its assignment and changelogs from "
                "it; pass either cluster=... or assignment=/changelog=..., not both"
            )
        if not isinstance(serving, bool):
            raise TypeError(f"serving must be True or False, got {serving!r}")
        if not serving and cluster is None:
            raise ValueError(
                "serving=False is for an application that writes batches to a cluster's "
                "changelogs; pass cluster=... too (an application without one serves what "
                "it writes)"
            )
        self.serving = serving
        """False for a writer: it writes batches to the cluster, is not a member, hosts no
        partition and is never routed to (SPEC 9)."""
        self._changelog = changelog
        self._specs: dict[str, StoreSpec] = {}
        self._connection = None if cluster is None else cluster.connect(self)
        if self._connection is not None:
            assignment = self._connection.assignment
        self._assignment = assignment or StandaloneAssignment()
        self._partitions = HostedPartitions(
            HostingSettings(
                self.application_id,
                processing_guarantee,
                changelog,
                self.plugins.query_handlers,
                followed=self._connection is not None,
            ),
            self._specs,
            self._state_directory,
        )
        self._committer = BatchCommitter(self._partitions, changelog)
        self._metadata = MetadataState(
            self.application_id, self._specs, self._assignment, self._partitions
        )
        self._state = AppState.CREATED
        self._state_lock = threading.RLock()
        self._leaving = False

    # -- declaring stores ------------------------------------------------------------------

    def key_value_store(
        self,
        name: str,
        partitions: int,
        engine: str = "memory",
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        caching: bool | int = False,
        logging: bool = False,
        partitioner: Partitioner | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> StoreSpec:
        """Declare a key-value store (keys default to strings, values to JSON)."""
        _check_caching(name, caching)
        return self._declare(
            KeyValueStoreSpec, name, partitions, engine, key_serde, value_serde,
            caching=caching, logging=logging, partitioner=partitioner, config=config,
        )  # fmt: skip

    def window_store(
        self,
        name: str,
        partitions: int,
        window_size_ms: int,
        retention_ms: int,
        engine: str = "memory",
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        logging: bool = False,
        partitioner: Partitioner | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> StoreSpec:
        """Declare a window store of fixed-size windows kept for `retention_ms`."""
        check_positive_int(f"store {name!r}: window_size_ms", window_size_ms)
        check_positive_int(f"store {name!r}: retention_ms", retention_ms)
        if retention_ms < window_size_ms:
            raise ValueError(
                f"store {name!r}: retention_ms ({retention_ms}) must be at least "
                f"window_size_ms ({window_size_ms})"
            )
        return self._declare(
            WindowStoreSpec, name, partitions, engine, key_serde, value_serde,
            logging=logging, partitioner=partitioner, config=config,
            window_size_ms=window_size_ms, retention_ms=retention_ms,
        )  # fmt: skip

    def timestamped_key_value_store(
        self,
        name: str,
        partitions: int,
        engine: str = "memory",
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        caching: bool | int = False,
        logging: bool = False,
        partitioner: Partitioner | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> StoreSpec:
        """Declare a timestamped key-value store (the store a KTable materialises): each
        value kept with the timestamp it was put with (`batch.put(..., timestamp=ms)`)."""
        _check_caching(name, caching)
        return self._declare(
            TimestampedKeyValueStoreSpec, name, partitions, engine, key_serde, value_serde,
            caching=caching, logging=logging, partitioner=partitioner, config=config,
        )  # fmt: skip

    def versioned_key_value_store(
        self,
        name: str,
        partitions: int,
        history_retention_ms: int,
        engine: str = "memory",
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        logging: bool = False,
        partitioner: Partitioner | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> StoreSpec:
        """Declare a versioned key-value store: every version of each key by timestamp
        (`batch.put(..., timestamp=ms)`, `batch.delete(..., timestamp=ms)`), kept for
        `history_retention_ms` behind the newest timestamp it has seen."""
        check_positive_int(f"store {name!r}: history_retention_ms", history_retention_ms, 0)
        return self._declare(
            VersionedKeyValueStoreSpec, name, partitions, engine, key_serde, value_serde,
            logging=logging, partitioner=partitioner, config=config,
            history_retention_ms=history_retention_ms,
        )  # fmt: skip

    def session_store(
        self,
        name: str,
        partitions: int,
        retention_ms: int,
        engine: str = "memory",
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        logging: bool = False,
        partitioner: Partitioner | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> StoreSpec:
        """Declare a session store: values per key and session
        (`batch.put(..., session=(start_ms, end_ms))`), kept for `retention_ms` after the
        newest session end it has seen."""
        check_positive_int(f"store {name!r}: retention_ms", retention_ms, 0)
        return self._declare(
            SessionStoreSpec, name, partitions, engine, key_serde, value_serde,
            logging=logging, partitioner=partitioner, config=config, retention_ms=retention_ms,
        )  # fmt: skip

    def global_key_value_store(
        self,
        name: str,
        engine: str = "memory",
        key_serde: Serde[Any] | str | None = None,
        value_serde: Serde[Any] | str | None = None,
        caching: bool | int = False,
        logging: bool = False,
        config: Mapping[str, Any] | None = None,
    ) -> StoreSpec:
        """Declare a global key-value store: one partition, hosted and answered by every
        instance (in distributed mode each follows its changelog and answers as an
        active does, positions and bounds included)."""
        _check_caching(name, caching)
        return self._declare(
            GlobalKeyValueStoreSpec, name, 1, engine, key_serde, value_serde,
            caching=caching, logging=logging, config=config,
        )  # fmt: skip

    def _declare(
        self,
        spec_type: type[StoreSpec],
        name: str,
        partitions: int,
        engine_name: str,
        key_serde: Serde[Any] | str | None,
        value_serde: Serde[Any] | str | None,
        **options: Any,
    ) -> StoreSpec:
        if self._state is not AppState.CREATED:
            raise RuntimeError(f"store {name!r}: stores must be declared before start()")
        if not isinstance(options.get("logging", False), bool):
            raise TypeError(
                f"store {name!r}: logging must be True or False, got {options['logging']!r}"
            )
        declaration = declare_store(
            self._specs.keys(),
            name,
            partitions,
            key_serde,
            value_serde,
            options.get("partitioner"),
            self.plugins,
        )
        engine = self.plugins.engine(engine_name, store=name)
        if spec_type is WindowStoreSpec and engine.window_store is None:
            raise ValueError(f"store {name!r}: engine {engine_name!r} has no window stores")
        config = dict(options.pop("config", None) or {})
        if engine.check_config is not None:
            engine.check_config(config, name)
        spec = spec_type(
            name=name,
            partitions=partitions,
            engine=engine,
            key_serde=declaration.key_serde,
            value_serde=declaration.value_serde,
            config=config,
            **options,
        )
        self._specs[name] = spec
        return spec

    @property
    def stores(self) -> Mapping[str, StoreSpec]:
        """The declared stores by name, as a read-only view."""
        return MappingProxyType(self._specs)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def state(self) -> AppState:
        return self._state

    def _transition(self, target: AppState) -> None:
        with self._state_lock:
            if target not in _TRANSITIONS[self._state]:
                raise RuntimeError(
                    f"application cannot go from {self._state.name} to {target.name}"
                )
            self._state = target

    def start(self) -> None:
        """Lock the state directory, open the assigned partitions, and start serving."""
        with self._state_lock:
            if self._state is not AppState.CREATED:
                again = (
                    ": an Application starts once; start a new one on the same state directory"
                    if self._state is AppState.NOT_RUNNING
                    else ""
                )
                raise RuntimeError(
                    f"start() needs a CREATED application, it is {self._state.name}{again}"
                )
            needs_changelog = [spec.name for spec in self._specs.values() if spec.logging]
            if needs_changelog and self._connection is not None:
                raise ValueError(
                    f"stores {needs_changelog} have logging=True, but in distributed mode "
                    "every store's changelog is its topic on the cluster already: drop "
                    "logging=True"
                )
            if needs_changelog and self._changelog is None:
                raise ValueError(
                    f"stores {needs_changelog} have logging=True but the application has no "
                    "changelog; pass changelog=... (for example iqstate.InMemoryChangelog())"
                )
            self._state_directory.lock()
            try:
                self._partitions.use_records(
                    self._state_directory.check_stores(list(self._specs.values()))
                )
                counts = {name: spec.partitions for name, spec in self._specs.items()}
                self._assignment.host_everywhere(
                    frozenset(
                        name
                        for name, spec in self._specs.items()
                        if isinstance(spec, GlobalKeyValueStoreSpec)
                    )
                )
                self._assignment.start(self.host_info, counts)
            except BaseException:
                self._state_directory.unlock()
                raise
            self._transition(AppState.REBALANCING)
            try:
                self._state_directory.record_new_stores()  # the start's checks passed
                self._partitions.install(self._assignment.assignment())
                self._assignment.add_listener(self._rebalance)
                if self._connection is not None:
                    self._connection.follow(self._partitions)
                self._transition(AppState.RUNNING)
            except BaseException:
                self._partitions.close_all()
                self._state_directory.unlock()
                self._transition(AppState.PENDING_ERROR)
                self._transition(AppState.ERROR)
                raise

    def leave(self) -> float:
        """Tell the cluster this instance is going, before `close()`: the other instances
        take its partitions over while it keeps hosting and answering them (from then on
        it follows the changelogs but takes no new role). Returns the seconds that takes,
        for a server to keep answering meanwhile (a drain: `iqstate serve` does this at
        SIGTERM); 0 without a cluster, or when not running."""
        with self._state_lock:
            if self._state is not _RUNNING and self._state is not _REBALANCING:
                return 0.0
            self._leaving = True
        return self._assignment.leave()

    @property
    def leaving(self) -> bool:
        """True once `leave()` was called: the instance answers still, but is going."""
        return self._leaving

    def close(self) -> None:
        """Stop serving and release every store and the directory lock (idempotent)."""
        with self._state_lock:
            if self._state is AppState.NOT_RUNNING:
                return
            self._transition(AppState.PENDING_SHUTDOWN)
            try:
                for name in self._partitions.store_names():
                    for hosted in self._partitions.of_store(name).values():
                        hosted.changes.end("the application closed")
                if self._connection is not None:
                    self._connection.close()
                self._assignment.close()
                self._partitions.close_all()
            finally:
                self._state_directory.unlock()
                self._transition(AppState.NOT_RUNNING)

    def __enter__(self) -> Application:
        """Start a CREATED application (a started one is entered as it is); a closed one
        cannot start again."""
        state = self._state
        if state is AppState.CREATED:
            self.start()
        elif not state.is_queryable:
            raise StreamsStoppedError(
                f"Cannot enter the application: it has been closed ({state.name}) and cannot "
                "start again; create a new Application on the same state directory instead."
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- assignment ------------------------------------------------------------------------

    def changelog_partition(self, store: str, partition: int) -> TopicPartition:
        return changelog_partition(self.application_id, store, partition)

    def _rebalance(self, assignment: Assignment) -> None:
        with self._state_lock:
            if not self._state.is_queryable:
                return
            if self._state is AppState.RUNNING:
                self._transition(AppState.REBALANCING)
            self._partitions.install(assignment)
            self._transition(AppState.RUNNING)

    def local_partitions(self) -> list[tuple[str, int, PartitionRole, Position]]:
        """Every store partition hosted here: store, partition, role and current position."""
        return self._partitions.local_partitions()

    def roles(self) -> dict[str, dict[int, PartitionRole]]:
        """The role of every store partition hosted here."""
        return self._partitions.roles()

    # -- writing ---------------------------------------------------------------------------

    def begin_batch(
        self,
        position: Position | Mapping[str, Mapping[int, int]] | None = None,
        batch_id: int | None = None,
        stores: Iterable[str] | None = None,
        *,
        allow_gaps: bool = False,
        first_batch_id: int | None = None,
    ) -> Batch:
        """A batch of writes, committed to every store partition when the `with` block ends.

        `position` is the source position the batch brings every store partition to;
        `batch_id` (increasing) fences replays: a partition that committed this id or a
        later one skips the batch. `stores` limits the batch to the stores one pipeline
        feeds (default: every store), so independent pipelines with their own batch ids
        and positions can share an application. A `batch_id` more than one past a
        partition's fence means batches are missing there (a rolled-back or replaced
        partition): the batch raises `BatchGapError` and writes nothing, unless
        `allow_gaps=True` says the pipeline's ids are not consecutive. `first_batch_id`
        is the id the pipeline's first batch had (Spark's is 0): a partition that has
        applied no batch yet then misses those from it on (a memory store restarted, a
        deleted state directory), which is a gap too.
        """
        if position is not None and not isinstance(position, Position):
            position = Position.from_map(position)
        if position is not None:
            _check_source_offsets(position)
        if batch_id is not None and (
            isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0
        ):
            raise ValueError(f"batch_id must be an int >= 0 or None, got {batch_id!r}")
        if first_batch_id is not None and (
            isinstance(first_batch_id, bool)
            or not isinstance(first_batch_id, int)
            or batch_id is None
            or not 0 <= first_batch_id <= batch_id
        ):
            raise ValueError(
                f"first_batch_id must be an int from 0 to batch_id ({batch_id!r}), got "
                f"{first_batch_id!r}"
            )
        covered = None
        if stores is not None:
            covered = frozenset(stores)
            for name in covered:
                self._spec(name)
        return Batch(
            self, position, batch_id, covered, allow_gaps=allow_gaps, first_batch_id=first_batch_id
        )

    def commit_batch(
        self, batch: Batch
    ) -> tuple[frozenset[StorePartition], frozenset[StorePartition]]:
        """Apply a batch that ended (called by `Batch`); see `begin_batch`.

        In distributed mode the batch goes to the changelogs and every replica, this
        instance's included, applies it by following them: nothing is applied here, so
        both returned sets are empty."""
        if self._connection is not None:
            self._check_queryable("write a batch")
            self._connection.write_batch(batch)
            return frozenset(), frozenset()
        with self._state_lock:
            self._check_queryable("write a batch")
            try:
                return self._committer.commit(batch)
            except (InvalidStateStoreError, BatchGapError):
                raise  # refused before anything was written
            except BaseException:
                self._transition(AppState.PENDING_ERROR)
                self._transition(AppState.ERROR)
                raise

    # -- querying --------------------------------------------------------------------------

    def _check_queryable(self, what: str = "query") -> None:
        state = self._state
        if state.is_queryable:
            return
        if state is AppState.CREATED:
            raise StreamsNotStartedError(
                f"Cannot {what}: the application has not been started; retry after start()."
            )
        advice = (
            "start a new Application on the same state directory"
            if state is AppState.NOT_RUNNING  # closed: the directory is free
            else "close() it (it holds its state directory until then) and start a new "
            "Application on the same state directory"
        )
        raise StreamsStoppedError(
            f"Cannot {what}: the application has been stopped ({state.name}) and can no "
            f"longer serve queries or take writes; {advice}."
        )

    def _spec(self, name: str) -> StoreSpec:
        spec = self._specs.get(name)
        if spec is None:
            raise UnknownStateStoreError(
                f"Cannot get state store {name!r} because no such store is declared; declared "
                f"stores: {', '.join(sorted(self._specs)) or 'none'}"
            )
        return spec

    def query(self, request: StateQueryRequest[T]) -> StateQueryResult[T]:
        """Run an IQv2 request against the partitions hosted here (SPEC section 3)."""
        name = request.store_name
        spec = self._specs.get(name)
        if spec is None:
            spec = self._spec(name)  # raises UnknownStateStoreError
        state = self._state  # identity checks: hashing an enum member costs more
        if state is not _RUNNING and state is not _REBALANCING:
            self._check_queryable()
        return _execute(spec, request, self._partitions.of_store(name))

    def store(self, parameters: StoreQueryParameters[T]) -> T:
        """An IQv1 read-only facade over the store partitions hosted here."""
        if self._state is AppState.CREATED:
            self._check_queryable("get a store")
        spec = self._spec(parameters.store_name)
        self._check_queryable("get a store")
        store_type = parameters.queryable_store_type
        if not store_type.accepts(spec):
            raise InvalidStateStoreError(
                f"Cannot get state store {spec.name!r} because the queryable store type "
                f"[{store_type.store_type}] does not accept the actual store type "
                f"[{spec.store_type}]."
            )
        partition = parameters.partition
        if partition is not None and partition >= spec.partitions:
            raise InvalidStateStorePartitionError(
                f"The specified partition {partition} for store {spec.name!r} does not exist; "
                f"it has partitions 0..{spec.partitions - 1}."
            )

        def resolve() -> list[HostedPartition]:
            self._check_queryable("read a store")
            hosted = self._partitions.of_store(spec.name)
            eligible = [
                h
                for p, h in sorted(hosted.items())
                if (parameters.stale_stores_enabled or h.role.is_running_active)
                and (partition is None or p == partition)
            ]
            if eligible:
                return eligible
            if partition is not None:
                raise InvalidStateStorePartitionError(
                    f"The specified partition {partition} for store {spec.name!r} is not "
                    "hosted here"
                    + ("" if parameters.stale_stores_enabled else " as a running active replica")
                    + "; it may have migrated to another instance."
                )
            raise InvalidStateStoreError(
                f"The state store, {spec.name!r}, may have migrated to another instance."
            )

        return store_type.facade(spec, resolve)

    # -- change subscriptions --------------------------------------------------------------

    def subscribe(
        self,
        store: str,
        *,
        key: Any = None,
        lower: Any = None,
        upper: Any = None,
        prefix: Any = None,
        from_cursor: str | None = None,
        partitions: Iterable[int] | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> Subscription:
        """Follow the committed changes of `store` (SPEC 12): an iterator (and async
        iterator) of `ChangeBatch`es, a snapshot of the matching keys per partition first,
        then every committed batch that changed one, whole and in commit order.

        Keys: one `key`, a range `lower`..`upper` (either may be open), a `prefix`, or
        all; bounds compare serialized keys, as a `RangeQuery` and `prefix_scan` do.
        `from_cursor` (a batch's `cursor`) resumes after that batch, replaying from the
        partition's replay buffer, or with a snapshot (`snapshot=True`) when the buffer no
        longer reaches back. `partitions` limits it to some of the partitions hosted here
        (default: all of them, or the key's). A subscriber with more than `max_pending`
        unread batches in a partition is disconnected: its iteration raises
        `SubscriptionLaggedError` naming the cursor to resume from.
        """
        spec = self._spec(store)
        self._check_queryable("subscribe")
        return Subscription(
            self.application_id,
            spec,
            self._partitions.of_store(store),
            keys=KeyFilter.build(spec, key, lower, upper, prefix),
            partitions=partitions,
            from_cursor=from_cursor,
            settings=self.change_buffer,
            max_pending=max_pending,
        )

    # -- discovery and lag -------------------------------------------------------------------

    def all_metadata(self) -> list[StreamsMetadata]:
        """Every instance and what it hosts (empty before `start()`)."""
        if self._state is AppState.CREATED:
            return []
        self._check_queryable("read metadata")
        return self._metadata.all_metadata()

    def all_metadata_for_store(self, name: str) -> list[StreamsMetadata]:
        """The instances hosting a partition of `name`, as active or standby."""
        return [
            metadata
            for metadata in self.all_metadata()
            if name in metadata.state_store_names or name in metadata.standby_state_store_names
        ]

    def query_metadata_for_key(
        self,
        name: str,
        key: Any,
        serializer: Serde[Any] | None = None,
        partitioner: Partitioner | None = None,
    ) -> KeyQueryMetadata | None:
        """Where `key` of store `name` lives; `None` for an unknown store."""
        if key is None:
            raise ValueError("query_metadata_for_key: the key must not be None")
        spec = self._specs.get(name)
        if spec is None:
            return None
        if self._state is AppState.CREATED:
            return KeyQueryMetadata.NOT_AVAILABLE
        self._check_queryable("read metadata")
        return self._metadata.for_key(spec, key, serializer, partitioner)

    def all_local_store_partition_lags(self) -> dict[str, dict[int, LagInfo]]:
        """How far each local store partition is behind the end of its changelog.

        Offsets count changelog records (the next offset to apply). A running active
        partition is its own changelog's end; stores without a changelog report zeros.
        """
        if self._state is AppState.CREATED:
            return {}
        self._check_queryable("read lags")
        return self._metadata.local_lags()

    def local_store_partition_lags(
        self, store: str, partitions: Iterable[int] | None = None
    ) -> dict[int, LagInfo]:
        """`all_local_store_partition_lags()[store]`, of the given `partitions` only (those
        hosted here): one partition's lag without working out every other's (a query that
        accepts a lag reads it). Empty for a store or partitions not hosted here."""
        if self._state is AppState.CREATED:
            return {}
        self._spec(store)  # raises UnknownStateStoreError
        self._check_queryable("read lags")
        return self._metadata.store_lags(store, partitions)

    def cluster_status(self) -> list[InstanceStatus]:
        """The cluster as this instance sees it: every live instance with the state and lag
        of each replica it hosts, then the instances that recently left or went silent.

        Lags of other instances are what they last reported (distributed mode reports them
        with every heartbeat); a standalone application is one live instance.
        """
        if self._state is AppState.CREATED:
            return []
        self._check_queryable("read the cluster's status")
        return self._metadata.cluster_status(self.host_info)

    @property
    def single_instance(self) -> bool:
        """Whether this instance is the application's only one (no cluster, no static layout
        of several): then no other instance finds it by its `application_server`."""
        return isinstance(self._assignment, StandaloneAssignment)

    def advertise(self, application_server: str) -> None:
        """Name `application_server` (`host:port`) in this instance's metadata and answers
        from now on, in place of the one it was made with: for a single instance served at
        an address known only once its server listens (`iqstate_http.start_background(app)`
        picks a free port). Instances of a cluster or a static layout find each other by
        that address, so theirs cannot change (`RuntimeError`)."""
        host_info = HostInfo.parse(application_server)
        assignment = self._assignment
        if not isinstance(assignment, StandaloneAssignment):
            raise RuntimeError(
                f"application {self.application_id!r} has several instances, which find each "
                f"other by application_server ({self.host_info}); it cannot change while it "
                "runs: give each instance its address when making the Application"
            )
        self.host_info = host_info  # what `start` names, if it has not yet
        assignment.serve_at(host_info)

    def cluster_contact(self) -> Contact | None:
        """How long this instance has not heard from its cluster, against the liveness
        timeout; `None` on one machine. Past the timeout (`Contact.lost`) its actives are
        `CUT_OFF` (queries requiring an active get `NOT_ACTIVE`) and its lags unknown."""
        return self._assignment.contact()

    def changelog_counts(self) -> ChangelogCounts | None:
        """In distributed mode, the changelog records applied and skipped here per store
        partition (`/metrics` exports them); None otherwise."""
        return None if self._connection is None else self._connection.changelog_counts()

    def commit_durations(self) -> dict[str, DurationsSnapshot]:
        """How long each store's batch commits took here, as a histogram per store
        (KIP-1035's commit metrics; `/metrics` exports them)."""
        return self._partitions.commit_durations()

    def metrics(self) -> dict[str, dict[int, dict[str, float]]]:
        """Per store partition metrics (operation rates and latencies, commit metrics)."""
        return self._partitions.metrics()


def _check_caching(name: str, caching: bool | int) -> None:
    if not isinstance(caching, int):  # "yes" would fail only at start()
        raise TypeError(f"store {name!r}: caching must be a bool or a size >= 1, got {caching!r}")
    if not isinstance(caching, bool) and caching < 1:
        raise ValueError(f"store {name!r}: caching must be a bool or a size >= 1, got {caching!r}")
