"""Changelog offsets, the batch fence and the position of stores the runtime keeps for.

A store that manages its offsets (KIP-1035) keeps them itself, atomically with its data.
For the others the runtime keeps them: in memory for stores that are not persistent (their
data is gone after a restart anyway), and for persistent ones in the legacy files beside
the store, `.checkpoint` (offsets) and `.position`, written atomically after each commit in
Kafka's `OffsetCheckpoint` text format.

The batch fence, the id of the last batch a store partition committed, travels as one more
offset under a reserved topic name, so it is committed exactly as atomically as the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from iqstate.engine import apply_offset_changes
from iqstate.errors import CorruptStateError
from iqstate.position import Position, TopicPartition
from iqstate.runtime.files import replace_atomically

FENCE_TOPIC = "__iqstate-batch-fence"
CHECKPOINT_FILE = ".checkpoint"
POSITION_FILE = ".position"
_FORMAT_VERSION = 0


def fence_partition(partition: int) -> TopicPartition:
    return TopicPartition(FENCE_TOPIC, partition)


def write_offsets_file(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Write `offsets` atomically (temp file, fsync, rename); an empty mapping removes the file."""
    if not offsets:
        path.unlink(missing_ok=True)
        return
    lines = [str(_FORMAT_VERSION), str(len(offsets))]
    for tp in sorted(offsets):
        if " " in tp.topic:
            raise ValueError(f"topic {tp.topic!r} cannot be written to {path.name}")
        lines.append(f"{tp.topic} {tp.partition} {offsets[tp]}")
    replace_atomically(path, "\n".join(lines) + "\n")


def read_offsets_file(path: Path) -> dict[TopicPartition, int]:
    """Read an offsets file; a missing file is empty, a malformed one is `CorruptStateError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptStateError(f"cannot read {path}: {exc}") from exc
    lines = text.splitlines()
    try:
        if not lines or int(lines[0]) != _FORMAT_VERSION:
            raise ValueError(f"unknown format version {lines[0] if lines else '(empty file)'!r}")
        expected = int(lines[1])
        entries = lines[2:]
        if len(entries) != expected:
            raise ValueError(f"header says {expected} entries, found {len(entries)}")
        offsets: dict[TopicPartition, int] = {}
        for number, line in enumerate(entries, start=3):
            topic, partition, offset = line.split(" ")
            if int(offset) < 0:
                raise ValueError(f"line {number}: negative offset {offset}")
            offsets[TopicPartition(topic, int(partition))] = int(offset)
    except (ValueError, IndexError, TypeError) as exc:
        raise CorruptStateError(
            f"{path} is corrupt ({exc}); delete the store partition's directory to rebuild it"
        ) from exc
    return offsets


def read_legacy_state(
    directory: Path,
) -> tuple[dict[TopicPartition, int], Position] | None:
    """The offsets and position in legacy files beside a store, or None when there are none."""
    checkpoint, position = directory / CHECKPOINT_FILE, directory / POSITION_FILE
    if not checkpoint.exists() and not position.exists():
        return None
    return read_offsets_file(checkpoint), offsets_to_position(read_offsets_file(position))


def position_to_offsets(position: Position) -> dict[TopicPartition, int]:
    return dict(position.components())


def offsets_to_position(offsets: Mapping[TopicPartition, int]) -> Position:
    components: dict[str, dict[int, int]] = {}
    for tp, offset in offsets.items():
        components.setdefault(tp.topic, {})[tp.partition] = offset
    return Position.from_map(components)


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
