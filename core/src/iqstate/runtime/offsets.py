"""Changelog offsets, the batch fence and the position of stores the runtime keeps for.

A store that manages its offsets (KIP-1035) keeps them itself, atomically with its data.
For the others the runtime keeps them: in memory for stores that are not persistent (their
data is gone after a restart anyway), and for persistent ones in the legacy files beside
the store, `.checkpoint` (offsets) and `.position` (see `iqstate.offset_files`).

The batch fence, the id of the last batch a store partition committed, travels as one more
offset under a reserved topic name, so it is committed exactly as atomically as the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from iqstate.engine_store import apply_offset_changes
from iqstate.offset_files import (
    CHECKPOINT_FILE,
    POSITION_FILE,
    offsets_to_position,
    position_to_offsets,
    read_offsets_file,
    write_offsets_file,
)
from iqstate.position import Position, TopicPartition

FENCE_TOPIC = "__iqstate-batch-fence"


def fence_partition(partition: int) -> TopicPartition:
    return TopicPartition(FENCE_TOPIC, partition)


class Committable(Protocol):
    """What `OffsetKeeper` needs of a store partition (a store chain offers it)."""

    @property
    def persistent(self) -> bool: ...

    @property
    def manages_offsets(self) -> bool: ...

    @property
    def position(self) -> Position: ...

    def update_position(self, position: Position) -> None: ...

    def commit(self, changelog_offsets: Mapping[TopicPartition, int | None]) -> None: ...

    def committed_offset(self, partition: TopicPartition) -> int | None: ...


class OffsetKeeper:
    """Commits a store partition and answers its committed offsets, whoever keeps them."""

    def __init__(self, store: Committable, directory: Path | None) -> None:
        self._store = store
        self._managed = store.manages_offsets
        self._directory = directory if (store.persistent and not self._managed) else None
        self._offsets: dict[TopicPartition, int] = {}

    def load(self) -> None:
        """Read what a previous run left: offsets, and the position into the store."""
        if self._directory is None:
            return
        self._offsets = read_offsets_file(self._directory / CHECKPOINT_FILE)
        position = offsets_to_position(read_offsets_file(self._directory / POSITION_FILE))
        if not position.is_empty():
            self._store.update_position(position)

    def commit(self, changes: Mapping[TopicPartition, int | None]) -> None:
        self._store.commit(changes)
        if self._managed:
            return
        apply_offset_changes(self._offsets, changes)
        if self._directory is not None:
            write_offsets_file(self._directory / CHECKPOINT_FILE, self._offsets)
            write_offsets_file(
                self._directory / POSITION_FILE, position_to_offsets(self._store.position)
            )

    def committed_offset(self, tp: TopicPartition) -> int | None:
        if self._managed:
            return self._store.committed_offset(tp)
        return self._offsets.get(tp)
