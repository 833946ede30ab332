"""One store partition hosted by this instance: its chain, role, lock, offsets and fence."""

from __future__ import annotations

import logging
import shutil
import threading
from typing import Any

from iqstate.changelog import ChangelogWriter
from iqstate.context import StateStoreContext
from iqstate.layers import CachingKeyValueStore, MeteredKeyValueStore, MeteredWindowStore
from iqstate.layers.wrapped import WrappedStore
from iqstate.persistent import UncleanShutdownError
from iqstate.position import Position, TopicPartition
from iqstate.runtime.assignment import PartitionRole
from iqstate.runtime.offsets import OffsetKeeper, fence_partition
from iqstate.runtime.spec import StoreSpec

_log = logging.getLogger(__name__)


class HostedPartition:
    """A store partition as the runtime holds it.

    `lock` serialises a batch's commit with queries and IQv1 reads of this partition, so a
    reader sees a partition either before or after a batch, never in between, and the
    position it reads belongs to the data it reads.
    """

    def __init__(
        self,
        spec: StoreSpec,
        partition: int,
        role: PartitionRole,
        context: StateStoreContext,
    ) -> None:
        self.spec = spec
        self.partition = partition
        self.role = role
        self.context = context
        self.lock = threading.Lock()
        self.store: MeteredKeyValueStore[Any, Any] | MeteredWindowStore[Any, Any] = spec.build()
        self.fence_partition = fence_partition(partition)
        self.changelog_partition: TopicPartition | None = context.changelog_partition
        self.fence: int | None = None
        self.closed = True
        self.rebuilt = False
        """True when an unclean store was wiped at open and restarted empty."""
        self._offsets: OffsetKeeper | None = None

    def open(self) -> None:
        try:
            self.store.init(self.context)
        except UncleanShutdownError as unclean:
            self._wipe(unclean)
            self.store = self.spec.build()
            self.store.init(self.context)
        self._offsets = OffsetKeeper(self.store, self.context.directory)
        self._offsets.load()
        self.fence = self._offsets.committed_offset(self.fence_partition)
        self.closed = False

    def _wipe(self, reason: UncleanShutdownError) -> None:
        """Delete an unclean store's files so it restarts empty (rebuilt from its changelog)."""
        directory = self.context.directory
        assert directory is not None  # only persistent stores report unclean shutdowns
        _log.warning("%s; wiping %s", reason, directory)
        for entry in directory.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.rebuilt = True

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                self.store.close()

    @property
    def offsets(self) -> OffsetKeeper:
        assert self._offsets is not None, "open() first"
        return self._offsets

    def committed_changelog_offset(self) -> int | None:
        if self.changelog_partition is None or self._offsets is None:
            return None
        return self._offsets.committed_offset(self.changelog_partition)

    def skips(self, batch_id: int | None) -> bool:
        """True iff this partition already committed `batch_id` (or a later batch)."""
        return batch_id is not None and self.fence is not None and batch_id <= self.fence

    def apply(
        self,
        entries: list[Any],
        position: Position | None,
        batch_id: int | None,
        changelog: ChangelogWriter | None,
    ) -> bool:
        """Write a batch's entries and commit them with the position and the fence, atomically.

        Returns False, changing nothing, when the fence says the batch was already applied.
        """
        with self.lock:
            if self.skips(batch_id):
                return False
            if position is not None:
                self.store.update_position(position)
            if entries:
                self.store.put_all_serialized(entries)
            fence = batch_id if batch_id is not None else self.fence
            changes: dict[TopicPartition, int | None] = {}
            if fence is not None:
                changes[self.fence_partition] = fence
            if changelog is not None and self.changelog_partition is not None:
                self._flush_caches()
                end = changelog.flush().get(self.changelog_partition)
                if end is not None:
                    changes[self.changelog_partition] = end
            self.offsets.commit(changes)
            self.fence = fence
            self.context.run_commit_callbacks()
            return True

    def _flush_caches(self) -> None:
        """Push cached writes into the changelog before its offsets are taken."""
        layer: Any = self.store
        while isinstance(layer, WrappedStore):
            if isinstance(layer, CachingKeyValueStore):
                layer.flush_buffer()
            layer = layer.wrapped
