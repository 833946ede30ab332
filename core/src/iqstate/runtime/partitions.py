"""The store partitions this instance hosts, and their lifecycle as assignments change."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from iqstate.changelog import ChangelogWriter, changelog_topic, outlives_the_process
from iqstate.context import ProcessingGuarantee, StateStoreContext
from iqstate.dispatch import QueryHandlerRegistry
from iqstate.position import Position, TopicPartition
from iqstate.runtime.assignment import Assignment, PartitionRole
from iqstate.runtime.committed import CommittedPartitions
from iqstate.runtime.durations import Durations, DurationsSnapshot
from iqstate.runtime.hosted import HostedPartition
from iqstate.runtime.spec import StoreSpec
from iqstate.runtime.state_directory import StateDirectory

NOTHING_HOSTED: Mapping[int, HostedPartition] = MappingProxyType({})


@dataclass(frozen=True)
class HostingSettings:
    """What every hosted partition's context is built from."""

    application_id: str
    processing_guarantee: ProcessingGuarantee
    changelog: ChangelogWriter | None
    query_handlers: QueryHandlerRegistry
    followed: bool = False
    """Distributed mode: every store partition follows its changelog topic, which a writer
    fills; the chains log nothing and commits need no fsync (the changelog is durable)."""


def changelog_partition(application_id: str, store: str, partition: int) -> TopicPartition:
    return TopicPartition(changelog_topic(application_id, store), partition)


class HostedPartitions:
    """Opens, re-roles and closes store partitions to match an assignment.

    The mapping is replaced as a whole (copy-on-write), so readers that took it keep a
    consistent view while an assignment is installed.
    """

    def __init__(
        self,
        settings: HostingSettings,
        specs: Mapping[str, StoreSpec],
        directory: StateDirectory,
    ) -> None:
        self._settings = settings
        self._specs = specs
        self._directory = directory
        self._committed: dict[str, CommittedPartitions] = {}
        self._hosted: dict[str, dict[int, HostedPartition]] = {}
        self._commit_durations: dict[str, Durations] = {}

    def use_records(self, committed: dict[str, CommittedPartitions]) -> None:
        """The records of partitions with committed data, per persistent store."""
        self._committed = committed

    def of_store(self, name: str) -> Mapping[int, HostedPartition]:
        """The hosted partitions of store `name` by partition number (maybe none)."""
        return self._hosted.get(name, NOTHING_HOSTED)

    def store_names(self) -> list[str]:
        return sorted(self._hosted)

    def _context(self, spec: StoreSpec, partition: int) -> StateStoreContext:
        settings = self._settings
        logged = spec.logging
        has_changelog = logged or settings.followed
        # a changelog the process does not outlive cannot repair a crash: commits sync
        repairable = settings.followed or (logged and outlives_the_process(settings.changelog))
        return StateStoreContext(
            application_id=settings.application_id,
            store_name=spec.name,
            partition=partition,
            directory=self._directory.partition_directory(spec, partition),
            config=spec.config,
            processing_guarantee=settings.processing_guarantee,
            changelog_partition=changelog_partition(settings.application_id, spec.name, partition)
            if has_changelog
            else None,
            changelog_writer=settings.changelog if logged else None,
            query_handlers=settings.query_handlers,
            sync_commits=settings.processing_guarantee == "exactly_once" and not repairable,
        )

    def install(self, assignment: Assignment) -> None:
        """Open, close and re-role partitions to match `assignment`."""
        hosted: dict[str, dict[int, HostedPartition]] = {}
        for name, partitions in self._hosted.items():
            for partition, current in partitions.items():
                role = assignment.role(name, partition)
                if role is None:
                    current.close()
                else:
                    current.take_role(role)
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
                        followed=self._settings.followed,
                        commit_durations=self._commit_durations.setdefault(name, Durations()),
                    )
                    partition_store.open()
                    opened.append(partition_store)
                    hosted.setdefault(name, {})[partition] = partition_store
        except BaseException:
            for partition_store in opened:  # release what this call opened, then fail
                partition_store.close()
            raise
        self._hosted = hosted

    def commit_durations(self) -> dict[str, DurationsSnapshot]:
        """Each store's commit durations, over every partition it has hosted here (stores
        that never hosted a partition here are absent)."""
        return {name: durations.snapshot() for name, durations in self._commit_durations.items()}

    def close_all(self) -> None:
        """Close every partition, also those after one whose close fails (a full disk fails
        the clean-close mark): each releases its files; the first failure is raised then."""
        failure: Exception | None = None
        for partitions in self._hosted.values():
            for hosted in partitions.values():
                try:
                    hosted.close()
                except Exception as exc:
                    failure = failure or exc
        self._hosted = {}
        if failure is not None:
            raise failure

    def local_partitions(self) -> list[tuple[str, int, PartitionRole, Position]]:
        return [
            (name, partition, hosted.role, hosted.chain.position)
            for name, partitions in sorted(self._hosted.items())
            for partition, hosted in sorted(partitions.items())
        ]

    def roles(self) -> dict[str, dict[int, PartitionRole]]:
        return {
            name: {partition: hosted.role for partition, hosted in partitions.items()}
            for name, partitions in self._hosted.items()
        }

    def metrics(self) -> dict[str, dict[int, dict[str, float]]]:
        return {
            name: {p: hosted.chain.metrics.snapshot() for p, hosted in sorted(parts.items())}
            for name, parts in sorted(self._hosted.items())
        }
