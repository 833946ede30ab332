"""Applying a batch to the hosted partitions: refuse it whole, or commit each partition."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from iqstate.changelog import ChangelogWriter
from iqstate.errors import BatchGapError, InvalidStateStoreError
from iqstate.runtime.batch import Batch, StorePartition
from iqstate.runtime.partitions import HostedPartitions

logger = logging.getLogger("iqstate.runtime.committer")


class BatchCommitter:
    """Checks a batch against the hosted partitions, then commits it partition by partition.

    Everything that would make a batch wrong for some partition (a store it does not cover,
    a partition not hosted as a running active replica, a gap after a partition's fence) is
    found before anything is written, so a refused batch writes nothing.
    """

    def __init__(self, partitions: HostedPartitions, changelog: ChangelogWriter | None) -> None:
        self._partitions = partitions
        self._changelog = changelog

    def commit(self, batch: Batch) -> tuple[frozenset[StorePartition], frozenset[StorePartition]]:
        pending = batch.pending()
        self._check_targets(batch, pending)
        covered = self._partitions.store_names() if batch.stores is None else sorted(batch.stores)
        if not batch.allow_gaps:
            self._check_no_gaps(covered, batch.batch_id, batch.first_batch_id)
        applied: list[StorePartition] = []
        skipped: list[StorePartition] = []
        behind: list[str] = []
        for name in covered:
            for partition, hosted in sorted(self._partitions.of_store(name).items()):
                if not hosted.role.is_running_active:
                    continue
                changelog = self._changelog if hosted.spec.logging else None
                entries = pending.get((name, partition), [])
                fence = hosted.fence
                done = hosted.apply(entries, batch.position, batch.batch_id, changelog)
                (applied if done else skipped).append((name, partition))
                # a crash's replay repeats the last batch; an older one is another writer's
                if not done and _older(batch.batch_id, fence):
                    behind.append(f"{name!r} partition {partition} (last batch {fence})")
        if behind:
            _warn_behind(batch.batch_id, behind)
        return frozenset(applied), frozenset(skipped)

    def _check_targets(self, batch: Batch, pending: Mapping[StorePartition, object]) -> None:
        for name, partition in pending:
            if batch.stores is not None and name not in batch.stores:
                raise InvalidStateStoreError(
                    f"batch writes to store {name!r}, which is not among the stores it "
                    f"covers ({', '.join(sorted(batch.stores))}); nothing was written"
                )
            hosted = self._partitions.of_store(name).get(partition)
            if hosted is None or not hosted.role.is_running_active:
                role = "not hosted" if hosted is None else hosted.role.state
                raise InvalidStateStoreError(
                    f"batch writes to store {name!r} partition {partition}, which this "
                    f"instance does not host as a running active replica ({role}); "
                    "nothing was written"
                )

    def _check_no_gaps(
        self, covered: list[str], batch_id: int | None, first_batch_id: int | None
    ) -> None:
        behind, empty = [], []
        for name in covered:
            for partition, hosted in sorted(self._partitions.of_store(name).items()):
                if not hosted.role.is_running_active:
                    continue
                missing = hosted.missing_batches(batch_id, first_batch_id)
                if missing:
                    where = f"store {name!r} partition {partition}"
                    if hosted.fence is None:
                        empty.append(f"{where} (holding nothing, missing {_describe_ids(missing)})")
                    else:
                        behind.append(
                            f"{where} (last batch {hosted.fence}, missing {_describe_ids(missing)})"
                        )
        if behind or empty:
            why = []
            if behind:
                why.append(
                    f"{'; '.join(behind)}: rolled back or replaced; replay the missing "
                    "batches, or pass allow_gaps=True if the batch ids are not consecutive"
                )
            if empty:
                why.append(
                    f"{'; '.join(empty)}: lost what the pipeline wrote before (a store in "
                    "memory restarted without a changelog, or a deleted state directory, "
                    "while the pipeline's checkpoint was kept) or added to a running "
                    "pipeline; keep stores that must outlive a restart on a persistent engine "
                    "(rocksdb, lmdb, sqlite) or with a changelog, or start the pipeline and "
                    "its stores over, or pass allow_gaps=True to begin with this batch"
                )
            raise BatchGapError(
                f"batch {batch_id} skips batches on {' - and on '.join(why)}. Nothing was written"
            )


def _older(batch_id: int | None, fence: int | None) -> bool:
    return batch_id is not None and fence is not None and batch_id < fence


def _warn_behind(batch_id: int | None, behind: list[str]) -> None:
    """A batch older than a partition's last one was skipped: not a crash's replay (that
    repeats the last batch), but most likely a writer whose batch ids started over."""
    logger.warning(
        "batch %s skipped on %s, which applied later batches: a replay after a crash "
        "repeats the last batch only, so another writer or a new checkpoint (whose batch "
        "ids start again at 0) is writing these stores, and its batches are dropped until "
        "their ids pass the stores' last batch. Give each streaming query its own stores, "
        "and keep a query's checkpoint while its stores live",
        batch_id,
        "; ".join(behind),
    )


def _describe_ids(ids: range) -> str:
    return str(ids.start) if len(ids) == 1 else f"{ids.start}..{ids.stop - 1}"
