"""The legacy offset files Kafka Streams keeps beside a store: `.checkpoint` and `.position`.

Stores that do not manage their offsets (KIP-1035) get them from the runtime, in Kafka's
`OffsetCheckpoint` text format, written atomically after each commit; stores that manage
their offsets migrate such files into themselves when they find them at init.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from iqstate.errors import CorruptStateError
from iqstate.files import replace_atomically
from iqstate.position import Position, TopicPartition

CHECKPOINT_FILE = ".checkpoint"
POSITION_FILE = ".position"
_FORMAT_VERSION = 0


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
        raise _unreadable(path, f"cannot be read: {exc}") from exc
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
        raise _unreadable(path, f"is corrupt ({exc})") from exc
    return offsets


def _unreadable(path: Path, what: str) -> CorruptStateError:
    """The error for an offsets file that cannot be used, with advice that keeps the data."""
    return CorruptStateError(
        f"{path} {what}. The store's data beside it is not affected: restore the file from "
        "a backup, or move it away to start without the offsets and batch fence it held (a "
        "store with a changelog then reads the changelog from its start). Do not delete the "
        "partition's directory: it holds the data"
    )


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
