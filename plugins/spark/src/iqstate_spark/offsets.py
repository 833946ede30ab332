"""Positions from Spark: the source offsets Spark recorded for a micro-batch.

Spark writes `<checkpointLocation>/offsets/<batchId>` before it runs a batch: a version
line, a metadata line, then one line per source with that source's end offset as JSON
(`-` for a source without one yet). A replayed batch after a crash has the same id and the
same file, so the position iqstate derives from it is the same on every replay.

How each source's offset becomes position components:

* `{"topic": {"0": 41, "1": 17}}` (Kafka-style, and iqstate's own Kafka source): each
  topic partition is a component, as it is;
* the file source's `{"logOffset": 12}`: one component, partition 0, offset 12;
* any other single integer (a JSON number, or a dict with one integer): one component,
  partition 0, offset that integer.

Components from the non-Kafka sources are named by `source_names` (by position in the
query's sources), or `spark-source-<i>` by default.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from iqstate import Position
from iqstate.errors import CorruptStateError


def offsets_file(checkpoint: str | Path, batch_id: int) -> Path:
    return Path(checkpoint) / "offsets" / str(batch_id)


def _components(offset: Any, name: str) -> dict[str, dict[int, int]]:
    if isinstance(offset, bool):
        raise ValueError(f"unsupported offset {offset!r}")
    if isinstance(offset, int):
        return {name: {0: offset}}
    if isinstance(offset, dict):
        if "logOffset" in offset and isinstance(offset["logOffset"], int):
            return {name: {0: offset["logOffset"]}}
        if offset and all(isinstance(v, dict) for v in offset.values()):
            return {
                str(topic): {int(partition): int(value) for partition, value in parts.items()}
                for topic, parts in offset.items()
            }
        integers = [v for v in offset.values() if isinstance(v, int) and not isinstance(v, bool)]
        if len(integers) == 1:
            return {name: {0: integers[0]}}
    raise ValueError(f"unsupported offset {offset!r}")


def batch_position(
    checkpoint: str | Path, batch_id: int, source_names: Sequence[str] | None = None
) -> Position:
    """The position of micro-batch `batch_id`: its sources' end offsets, as recorded by Spark."""
    path = offsets_file(checkpoint, batch_id)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CorruptStateError(
            f"no offsets for batch {batch_id} in {path.parent}; is {checkpoint} the query's "
            "checkpointLocation?"
        ) from None
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise CorruptStateError(f"{path} is not a Spark offsets file")
    components: dict[str, dict[int, int]] = {}
    for index, line in enumerate(lines[2:]):
        if line.strip() in ("", "-"):
            continue
        name = (
            source_names[index]
            if source_names and index < len(source_names)
            else f"spark-source-{index}"
        )
        try:
            components.update(_components(json.loads(line), name))
        except ValueError as exc:
            raise CorruptStateError(f"{path} line {index + 3}: {exc}") from exc
    return Position.from_map(components)


def committed_batches(checkpoint: str | Path) -> int:
    """How many micro-batches the query has committed: one past the last id in `commits/`.

    Spark writes `<checkpointLocation>/commits/<n>` once batch `n` is done; a batch with
    offsets but no commit runs again on restart. 0 for a query that has not run yet.
    """
    commits = Path(checkpoint) / "commits"
    ids = [int(path.name) for path in commits.glob("*") if path.name.isdigit()]
    return max(ids) + 1 if ids else 0
