"""Positions from Spark: the source offsets Spark recorded for a micro-batch.

Spark writes `<checkpointLocation>/offsets/<batchId>` before it runs a batch: a version
line, a metadata line, then one line per source with that source's end offset as JSON
(`-` for a source without one yet). Version `v1` writes the offset alone, in the order of
the query's sources; `v2` (Spark 4.1+, optional) writes `<source id>:<offset>`, and the id
names the source's components unless `source_names` does. A replayed batch after a crash
has the same id and the same file, so the position iqstate derives from it is the same on
every replay.

How each source's offset becomes position components:

* `{"topic": {"0": 41, "1": 17}}` (Spark's Kafka source: the next offset to read per
  partition, exclusive): each topic partition is a component, as it is;
* the file source's `{"logOffset": 12}`: one component, partition 0, offset 12;
* any other single integer (a JSON number, or a dict with one integer): one component,
  partition 0, offset that integer.

Components from the non-Kafka sources are named by `source_names` (by position in the
query's sources), or `spark-source-<i>` by default. A component two sources name (two
Kafka sources of one topic) takes, per partition, the lower of their offsets.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from iqstate import Position
from iqstate.errors import CorruptStateError, IqstateError


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
    version = lines[0][1:] if lines and lines[0].startswith("v") else ""
    if len(lines) < 2 or not version.isdigit():
        raise CorruptStateError(f"{path} is not a Spark offsets file")
    components: dict[str, dict[int, int]] = {}
    for index, line in enumerate(lines[2:]):
        source_id = None
        if int(version) >= 2:
            source_id, colon, line = line.partition(":")
            if not colon or source_id.lstrip()[:1] in ("{", "[", '"'):
                raise CorruptStateError(
                    f"{path} line {index + 3}: expected '<source id>:<offset>' in a "
                    f"v{version} offsets file, got {source_id + colon + line!r}"
                )
        if line.strip() in ("", "-"):
            continue
        if source_names and index < len(source_names):
            name = source_names[index]
        else:
            name = source_id or f"spark-source-{index}"
        try:
            found = _components(json.loads(line), name)
        except ValueError as exc:
            raise CorruptStateError(f"{path} line {index + 3}: {exc}") from exc
        for component, offsets in found.items():
            known = components.setdefault(component, {})
            for partition, offset in offsets.items():
                # Two sources reading one topic (a self-join): the store holds what both
                # read, up to the lower offset; the higher would meet bounds too early.
                known[partition] = min(offset, known.get(partition, offset))
    return Position.from_map(components)


def running_batch_position(
    batch_df: Any,
    batch_id: int,
    checkpoint: Path | None,
    source_names: Sequence[str] | None = None,
) -> Position:
    """The position of the micro-batch `foreachBatch` is running: from `checkpoint`, or
    the running query's own checkpoint when None."""
    found = checkpoint or checkpoint_of_running_query(batch_df)
    return batch_position(found, batch_id, source_names)


def checkpoint_of_running_query(batch_df: Any) -> Path:
    """The checkpoint directory of the streaming query that is running this foreachBatch."""
    from pyspark.sql import SparkSession

    query_id = batch_df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    query = SparkSession.builder.getOrCreate().streams.get(query_id) if query_id else None
    if query is None:
        raise IqstateError(
            "cannot find the streaming query running this batch; pass checkpoint=<the query's "
            "checkpointLocation> to iqstate_spark.to_store"
        )
    return local_checkpoint(
        str(query._jsq.streamingQuery().resolvedCheckpointRoot()), "the query's checkpoint"
    )


def local_checkpoint(location: str | Path, what: str) -> Path:
    """The directory of a checkpoint location given as a path or a `file:` URL; an error
    naming `what` for another scheme (iqstate reads batch offsets from the directory)."""
    if isinstance(location, Path):
        return location
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if len(parsed.scheme) > 1:  # a Windows drive letter is no scheme
        raise IqstateError(
            f"{what} {location} is not on the local file system (or a file: URL); iqstate "
            "reads batch offsets from it"
        )
    return Path(location)


def committed_batches(checkpoint: str | Path) -> int:
    """How many micro-batches the query has committed: one past the last id in `commits/`.

    Spark writes `<checkpointLocation>/commits/<n>` once batch `n` is done; a batch with
    offsets but no commit runs again on restart. 0 for a query that has not run yet.
    """
    commits = Path(checkpoint) / "commits"
    ids = [int(path.name) for path in commits.glob("*") if path.name.isdigit()]
    return max(ids) + 1 if ids else 0
