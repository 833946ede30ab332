"""`Application`: hosts partitioned stores, applies batches, answers queries and discovery."""

from __future__ import annotations

import enum
import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, TypeVar

from iqstate.changelog import ChangelogWriter
from iqstate.context import ProcessingGuarantee, StateStoreContext
from iqstate.errors import (
    BatchGapError,
    CorruptStateError,
    IncompatibleStateError,
    InvalidStateStoreError,
    InvalidStateStorePartitionError,
    StreamsNotStartedError,
    StreamsStoppedError,
    UnknownStateStoreError,
)
from iqstate.layers.changelogging import changelog_topic
from iqstate.plugins import PluginRegistry, default_registry
from iqstate.position import Position, TopicPartition
from iqstate.request import StateQueryRequest
from iqstate.results import StateQueryResult
from iqstate.runtime.assignment import (
    Assignment,
    AssignmentProvider,
    PartitionRole,
    StandaloneAssignment,
)
from iqstate.runtime.batch import Batch, StorePartition
from iqstate.runtime.committed import CommittedPartitions
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.iqv1 import StoreQueryParameters
from iqstate.runtime.lock import DirectoryLock
from iqstate.runtime.metadata import HostInfo, KeyQueryMetadata, LagInfo, StreamsMetadata
from iqstate.runtime.names import check_name, check_positive_int
from iqstate.runtime.partitioner import Partitioner, partition_for_bytes
from iqstate.runtime.querying import execute as _execute
from iqstate.runtime.spec import StoreSpec, StoreType, checked_partition
from iqstate.serdes import Serde, Serdes

T = TypeVar("T")
STORE_METADATA_FILE = "store.json"
_NOTHING_HOSTED: Mapping[int, HostedPartition] = {}


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
    ) -> None:
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
        self.directory = self.state_dir / self.application_id
        self._plugins = plugins or default_registry()
        self._assignment = assignment or StandaloneAssignment()
        self._changelog = changelog
        self._specs: dict[str, StoreSpec] = {}
        self._committed: dict[str, CommittedPartitions] = {}
        self._hosted: dict[str, dict[int, HostedPartition]] = {}
        self._state = AppState.CREATED
        self._state_lock = threading.RLock()
        self._lock = DirectoryLock(self.directory)

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
        if isinstance(caching, int) and not isinstance(caching, bool) and caching < 1:
            raise ValueError(f"store {name!r}: caching must be a bool or a size >= 1")
        return self._declare(
            name, "key_value", partitions, engine, key_serde, value_serde,
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
            name, "window", partitions, engine, key_serde, value_serde,
            logging=logging, partitioner=partitioner, config=config,
            window_size_ms=window_size_ms, retention_ms=retention_ms,
        )  # fmt: skip

    def _declare(
        self,
        name: str,
        store_type: StoreType,
        partitions: int,
        engine_name: str,
        key_serde: Serde[Any] | str | None,
        value_serde: Serde[Any] | str | None,
        **options: Any,
    ) -> StoreSpec:
        check_name("store", name)
        if self._state is not AppState.CREATED:
            raise RuntimeError(f"store {name!r}: stores must be declared before start()")
        if name in self._specs:
            raise ValueError(f"store {name!r} is declared twice")
        check_positive_int(f"store {name!r}: partitions", partitions)
        engine = self._plugins.engine(engine_name, store=name)
        if store_type == "window" and engine.window_store is None:
            raise ValueError(f"store {name!r}: engine {engine_name!r} has no window stores")
        config = dict(options.get("config") or {})
        if engine.check_config is not None:
            engine.check_config(config, name)
        partitioner = options.get("partitioner")
        if partitioner is not None and not callable(partitioner):
            raise TypeError(f"store {name!r}: partitioner must be callable(key, partitions)")
        spec = StoreSpec(
            name=name,
            store_type=store_type,
            partitions=partitions,
            engine=engine,
            key_serde=self._plugins.serde(key_serde or Serdes.string(), store=name),
            value_serde=self._plugins.serde(value_serde or Serdes.json(), store=name),
            caching=options.get("caching", False),
            logging=bool(options.get("logging", False)),
            partitioner=partitioner,
            window_size_ms=options.get("window_size_ms", 0),
            retention_ms=options.get("retention_ms", 0),
            config=config,
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
                raise RuntimeError(f"start() needs a CREATED application, it is {self._state.name}")
            needs_changelog = [spec.name for spec in self._specs.values() if spec.logging]
            if needs_changelog and self._changelog is None:
                raise ValueError(
                    f"stores {needs_changelog} have logging=True but the application has no "
                    "changelog; pass changelog=... (for example iqstate.InMemoryChangelog())"
                )
            self._lock.acquire()
            try:
                self._check_store_directories()
                counts = {name: spec.partitions for name, spec in self._specs.items()}
                self._assignment.start(self.host_info, counts)
            except BaseException:
                self._lock.release()
                raise
            self._transition(AppState.REBALANCING)
            try:
                self._install(self._assignment.assignment())
                self._assignment.add_listener(self._rebalance)
                self._transition(AppState.RUNNING)
            except BaseException:
                self._close_partitions()
                self._lock.release()
                self._transition(AppState.PENDING_ERROR)
                self._transition(AppState.ERROR)
                raise

    def _check_store_directories(self) -> None:
        """Recognise persistent stores from an earlier run; refuse ones declared differently."""
        for spec in self._specs.values():
            if not spec.engine.persistent:
                continue
            directory = self.directory / spec.name
            directory.mkdir(parents=True, exist_ok=True)
            metadata_file = directory / STORE_METADATA_FILE
            declared = spec.describe()
            if metadata_file.exists():
                try:
                    recorded = json.loads(metadata_file.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    raise CorruptStateError(f"cannot read {metadata_file}: {exc}") from exc
                if recorded != declared:
                    raise IncompatibleStateError(
                        f"store {spec.name!r} in {directory} was created as {recorded} but is "
                        f"declared as {declared}; move the directory away or declare the "
                        "store as it was"
                    )
            else:
                metadata_file.write_text(json.dumps(declared, sort_keys=True), encoding="utf-8")
            self._committed[spec.name] = CommittedPartitions(directory)

    def close(self) -> None:
        """Stop serving and release every store and the directory lock (idempotent)."""
        with self._state_lock:
            if self._state is AppState.NOT_RUNNING:
                return
            self._transition(AppState.PENDING_SHUTDOWN)
            try:
                self._assignment.close()
                self._close_partitions()
            finally:
                self._lock.release()
                self._transition(AppState.NOT_RUNNING)

    def _close_partitions(self) -> None:
        for partitions in self._hosted.values():
            for hosted in partitions.values():
                hosted.close()
        self._hosted = {}

    def __enter__(self) -> Application:
        if self._state is AppState.CREATED:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- assignment ------------------------------------------------------------------------

    def _context(self, spec: StoreSpec, partition: int) -> StateStoreContext:
        directory = None
        if spec.engine.persistent:
            directory = self.directory / spec.name / str(partition)
            directory.mkdir(parents=True, exist_ok=True)
        return StateStoreContext(
            application_id=self.application_id,
            store_name=spec.name,
            partition=partition,
            directory=directory,
            config=spec.config,
            processing_guarantee=self.processing_guarantee,
            changelog_partition=self.changelog_partition(spec.name, partition)
            if spec.logging
            else None,
            changelog_writer=self._changelog if spec.logging else None,
            query_handlers=self._plugins.query_handlers,
            sync_commits=self.processing_guarantee == "exactly_once" and not spec.logging,
        )

    def changelog_partition(self, store: str, partition: int) -> TopicPartition:
        return TopicPartition(changelog_topic(self.application_id, store), partition)

    def _install(self, assignment: Assignment) -> None:
        """Open, close and re-role partitions to match `assignment` (copy-on-write)."""
        hosted: dict[str, dict[int, HostedPartition]] = {}
        for name, partitions in self._hosted.items():
            for partition, current in partitions.items():
                role = assignment.role(name, partition)
                if role is None:
                    current.close()
                else:
                    current.role = role
                    hosted.setdefault(name, {})[partition] = current
        opened: list[HostedPartition] = []
        try:
            for name, partition, role in assignment.items():
                if partition not in hosted.get(name, {}):
                    spec = self._specs[name]
                    partition_store = HostedPartition(
                        spec,
                        partition,
                        role,
                        self._context(spec, partition),
                        self._committed.get(name),
                    )
                    partition_store.open()
                    opened.append(partition_store)
                    hosted.setdefault(name, {})[partition] = partition_store
        except BaseException:
            for partition_store in opened:  # release what this call opened, then fail
                partition_store.close()
            raise
        self._hosted = hosted

    def _rebalance(self, assignment: Assignment) -> None:
        with self._state_lock:
            if not self._state.is_queryable:
                return
            if self._state is AppState.RUNNING:
                self._transition(AppState.REBALANCING)
            self._install(assignment)
            self._transition(AppState.RUNNING)

    def local_partitions(self) -> list[tuple[str, int, PartitionRole, Position]]:
        """Every store partition hosted here: store, partition, role and current position."""
        return [
            (name, partition, hosted.role, hosted.store.position)
            for name, partitions in sorted(self._hosted.items())
            for partition, hosted in sorted(partitions.items())
        ]

    def roles(self) -> dict[str, dict[int, PartitionRole]]:
        """The role of every store partition hosted here."""
        return {
            name: {partition: hosted.role for partition, hosted in partitions.items()}
            for name, partitions in self._hosted.items()
        }

    # -- writing ---------------------------------------------------------------------------

    def begin_batch(
        self,
        position: Position | Mapping[str, Mapping[int, int]] | None = None,
        batch_id: int | None = None,
        stores: Iterable[str] | None = None,
        *,
        allow_gaps: bool = False,
    ) -> Batch:
        """A batch of writes, committed to every store partition when the `with` block ends.

        `position` is the source position the batch brings every store partition to;
        `batch_id` (increasing) fences replays: a partition that committed this id or a
        later one skips the batch. `stores` limits the batch to the stores one pipeline
        feeds (default: every store), so independent pipelines with their own batch ids
        and positions can share an application. A `batch_id` more than one past a
        partition's fence means batches are missing there (a rolled-back or replaced
        partition): the batch raises `BatchGapError` and writes nothing, unless
        `allow_gaps=True` says the pipeline's ids are not consecutive.
        """
        if position is not None and not isinstance(position, Position):
            position = Position.from_map(position)
        if batch_id is not None and (
            isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0
        ):
            raise ValueError(f"batch_id must be an int >= 0 or None, got {batch_id!r}")
        covered = None
        if stores is not None:
            covered = frozenset(stores)
            for name in covered:
                self._spec(name)
        return Batch(self, position, batch_id, covered, allow_gaps=allow_gaps)

    def _commit_batch(
        self, batch: Batch
    ) -> tuple[frozenset[StorePartition], frozenset[StorePartition]]:
        with self._state_lock:
            self._check_queryable("write a batch")
            pending = batch.pending()
            for (name, partition), _entries in pending.items():
                if batch.stores is not None and name not in batch.stores:
                    raise InvalidStateStoreError(
                        f"batch writes to store {name!r}, which is not among the stores it "
                        f"covers ({', '.join(sorted(batch.stores))}); nothing was written"
                    )
                hosted = self._hosted.get(name, {}).get(partition)
                if hosted is None or not hosted.role.is_running_active:
                    role = "not hosted" if hosted is None else hosted.role.state
                    raise InvalidStateStoreError(
                        f"batch writes to store {name!r} partition {partition}, which this "
                        f"instance does not host as a running active replica ({role}); "
                        "nothing was written"
                    )
            covered = sorted(self._hosted if batch.stores is None else batch.stores)
            if not batch.allow_gaps:
                self._check_no_gaps(covered, batch.batch_id)
            applied: list[StorePartition] = []
            skipped: list[StorePartition] = []
            try:
                for name in covered:
                    for partition, hosted in sorted(self._hosted.get(name, {}).items()):
                        if not hosted.role.is_running_active:
                            continue
                        changelog = self._changelog if hosted.spec.logging else None
                        entries = pending.get((name, partition), [])
                        done = hosted.apply(entries, batch.position, batch.batch_id, changelog)
                        (applied if done else skipped).append((name, partition))
            except BaseException:
                self._transition(AppState.PENDING_ERROR)
                self._transition(AppState.ERROR)
                raise
            return frozenset(applied), frozenset(skipped)

    def _check_no_gaps(self, covered: list[str], batch_id: int | None) -> None:
        gaps = [
            f"store {name!r} partition {partition} (last batch {hosted.fence}, missing "
            f"{_describe_ids(missing)})"
            for name in covered
            for partition, hosted in sorted(self._hosted.get(name, {}).items())
            if hosted.role.is_running_active and (missing := hosted.missing_batches(batch_id))
        ]
        if gaps:
            raise BatchGapError(
                f"batch {batch_id} skips batches on {'; '.join(gaps)}: those partitions were "
                "rolled back or replaced. Nothing was written. Replay the missing batches, "
                "or pass allow_gaps=True to begin_batch if the batch ids are not consecutive"
            )

    # -- querying --------------------------------------------------------------------------

    def _check_queryable(self, what: str = "query") -> None:
        state = self._state
        if state.is_queryable:
            return
        if state is AppState.CREATED:
            raise StreamsNotStartedError(
                f"Cannot {what}: the application has not been started; retry after start()."
            )
        raise StreamsStoppedError(
            f"Cannot {what}: the application has been stopped ({state.name}) and can no "
            "longer serve queries."
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
        name = request._store
        spec = self._specs.get(name)
        if spec is None:
            spec = self._spec(name)  # raises UnknownStateStoreError
        state = self._state  # identity checks: hashing an enum member costs more
        if state is not _RUNNING and state is not _REBALANCING:
            self._check_queryable()
        return _execute(spec, request, self._hosted.get(name, _NOTHING_HOSTED))

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
            hosted = self._hosted.get(spec.name, {})
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

    # -- discovery and lag -------------------------------------------------------------------

    def _metadata_for(self, host: HostInfo, assignment: Assignment) -> StreamsMetadata:
        active_names: set[str] = set()
        standby_names: set[str] = set()
        active_tps: set[TopicPartition] = set()
        standby_tps: set[TopicPartition] = set()
        for name, partition, role in assignment.items():
            names, tps = (
                (active_names, active_tps) if role.is_active else (standby_names, standby_tps)
            )
            names.add(name)
            tps.add(self.changelog_partition(name, partition))
        return StreamsMetadata(
            host, frozenset(active_names), frozenset(active_tps),
            frozenset(standby_names), frozenset(standby_tps),
        )  # fmt: skip

    def all_metadata(self) -> list[StreamsMetadata]:
        """Every instance and what it hosts (empty before `start()`)."""
        if self._state is AppState.CREATED:
            return []
        self._check_queryable("read metadata")
        cluster = self._assignment.cluster()
        return [self._metadata_for(host, cluster[host]) for host in sorted(cluster)]

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
        if partitioner is not None:
            partition = checked_partition(partitioner(key, spec.partitions), spec)
        elif serializer is not None:
            partition = partition_for_bytes(serializer.serialize(key), spec.partitions)
        else:
            partition = spec.partition_of(key, spec.key_serde.serialize(key))
        active = HostInfo.unavailable()
        standbys: set[HostInfo] = set()
        for host, assignment in self._assignment.cluster().items():
            role = assignment.role(name, partition)
            if role is None:
                continue
            if role.is_active:
                active = host
            else:
                standbys.add(host)
        return KeyQueryMetadata(active, frozenset(standbys), partition)

    def all_local_store_partition_lags(self) -> dict[str, dict[int, LagInfo]]:
        """How far each local store partition is behind the end of its changelog.

        Offsets count changelog records (the next offset to apply). A running active
        partition is its own changelog's end; stores without a changelog report zeros.
        """
        if self._state is AppState.CREATED:
            return {}
        self._check_queryable("read lags")
        lags: dict[str, dict[int, LagInfo]] = {}
        for name in sorted(self._hosted):
            for partition, hosted in sorted(self._hosted[name].items()):
                current = hosted.committed_changelog_offset() or 0
                end = self._assignment.end_offset(name, partition)
                if end is None or hosted.role.is_running_active:
                    end = max(current, end or 0)
                lags.setdefault(name, {})[partition] = LagInfo(current, end, hosted.rebuilt)
        return lags

    def metrics(self) -> dict[str, dict[int, dict[str, float]]]:
        """Per store partition metrics (operation rates and latencies, commit metrics)."""
        return {
            name: {p: hosted.store.metrics.snapshot() for p, hosted in sorted(parts.items())}
            for name, parts in sorted(self._hosted.items())
        }


def _describe_ids(ids: range) -> str:
    return str(ids.start) if len(ids) == 1 else f"{ids.start}..{ids.stop - 1}"
