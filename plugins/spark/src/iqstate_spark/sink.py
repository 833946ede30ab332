"""`to_store`: a `foreachBatch` function that writes each micro-batch into an iqstate store.

    sink = iqstate_spark.to_store(app, "word-counts", key="word", value="count")
    df.writeStream.foreachBatch(sink)

Each micro-batch is collected to the driver as Arrow (`DataFrame.toArrow()`), never row by
row, and written with `app.begin_batch(position=<the batch's source offsets>,
batch_id=<Spark's batch id>)` covering this store only. Spark re-runs an uncommitted batch
after a crash with the same id and offsets, and the batch fence makes that replay change
nothing where the batch already landed: the store is updated exactly once, and every
partition's position is the source offsets the batch ended at.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlparse

import pyarrow as pa

from iqstate import Application
from iqstate.errors import IqstateError
from iqstate_spark.offsets import batch_position
from iqstate_spark.rows import RowColumns
from iqstate_spark.stopping import interrupted_by_stop

if TYPE_CHECKING:
    from iqstate_spark.cluster_stores import ClusterStores
    from iqstate_spark.distributed import ClusterSink

OutputMode = Literal["append", "update", "complete"]


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
    root = str(query._jsq.streamingQuery().resolvedCheckpointRoot())
    parsed = urlparse(root)
    if parsed.scheme not in ("", "file"):
        raise IqstateError(
            f"the query's checkpoint {root} is not on the local file system; iqstate reads "
            "batch offsets from it"
        )
    return Path(parsed.path if parsed.scheme else root)


class StoreSink:
    """The callable `to_store` returns: `sink(batch_df, batch_id)` for `foreachBatch`."""

    def __init__(
        self,
        app: Application,
        store: str,
        key: str,
        value: str | Sequence[str] | None,
        window: str | None,
        tombstone: str | None,
        output_mode: OutputMode,
        checkpoint: str | Path | None,
        source_names: Sequence[str] | None,
    ) -> None:
        spec = app.stores.get(store)
        if spec is None:
            raise IqstateError(
                f"to_store: the application declares no store {store!r}; declared: "
                f"{', '.join(sorted(app.stores)) or 'none'}"
            )
        if output_mode not in ("append", "update", "complete"):
            raise ValueError(
                f"to_store: output_mode must be append, update or complete, got {output_mode!r}"
            )
        if spec.store_type == "window":
            window = window or "window"
            if output_mode == "complete":
                raise ValueError("to_store: complete mode is supported for key-value stores only")
        elif window is not None:
            raise ValueError(
                f"to_store: store {store!r} is a key-value store; window= does not apply"
            )
        self.app, self.store, self.key, self.value = app, store, key, value
        self.window, self.tombstone, self.output_mode = window, tombstone, output_mode
        self.columns = RowColumns.of(store, key, value, window, tombstone)
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.source_names = source_names
        self.last_batch: tuple[int, int] | None = None
        """`(batch_id, rows)` of the last micro-batch written, for progress reports."""

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        checkpoint = self.checkpoint or checkpoint_of_running_query(batch_df)
        position = batch_position(checkpoint, batch_id, self.source_names)
        with interrupted_by_stop(batch_df, self.store, batch_id):
            table: pa.Table = batch_df.toArrow()
        self.columns.check(table.column_names)
        keys = self.columns.keys(table)
        values = self.columns.values(table)
        with self.app.begin_batch(
            position=position, batch_id=batch_id, stores=[self.store]
        ) as batch:
            if self.window is not None:
                starts = self.columns.window_starts_ms(table)
                batch.put_all_windows(self.store, zip(keys, starts, values, strict=True))
            else:
                if self.output_mode == "complete":
                    batch.put_all(self.store, self._removed_keys(set(keys)))
                batch.put_all(self.store, zip(keys, values, strict=True))
        self.last_batch = (batch_id, table.num_rows)

    def _removed_keys(self, present: set[Any]) -> list[tuple[Any, None]]:
        """In complete mode the batch is the whole result: keys not in it were removed."""
        from iqstate import QueryableStoreTypes, StoreQueryParameters

        current = self.app.store(
            StoreQueryParameters.from_name_and_type(
                self.store, QueryableStoreTypes.key_value_store()
            )
        )
        with current.all() as pairs:
            return [(key, None) for key, _ in pairs if key not in present]


def to_store(
    target: Application | ClusterStores,
    store: str,
    key: str,
    value: str | Sequence[str] | None = None,
    *,
    window: str | None = None,
    tombstone: str | None = None,
    output_mode: OutputMode = "update",
    checkpoint: str | Path | None = None,
    source_names: Sequence[str] | None = None,
) -> StoreSink | ClusterSink:
    """A `foreachBatch` function writing each micro-batch into `store`, exactly once.

    `target` is an `Application` (embedded mode: the driver writes into its stores) or a
    `ClusterStores` (distributed mode: Spark's executors write the store's changelog topic,
    which the serving instances follow; see `iqstate_spark.distributed`).
    `key` names the key column; `value` the value column (a list of columns makes a dict
    value; omitted, every other column). A null value deletes the key; so does a true
    `tombstone` column. Window stores take the window start from the `window` column (a
    struct with `start`, as `F.window` makes). `output_mode="complete"` (embedded mode only)
    makes the store equal to each batch (keys missing from the batch are deleted). The
    batch's position is read from the query's checkpoint (found automatically; pass
    `checkpoint` when the query is not in this process's default session).
    """
    from iqstate_spark.cluster_stores import ClusterStores

    if isinstance(target, ClusterStores):
        from iqstate_spark.distributed import ClusterSink

        return ClusterSink(
            target, store, key, value, window, tombstone, output_mode, checkpoint, source_names
        )
    if not isinstance(target, Application):
        raise TypeError(
            "to_store: the target must be an iqstate Application (embedded mode) or "
            f"iqstate_spark.ClusterStores (distributed mode), got {type(target).__name__}"
        )
    return StoreSink(
        target, store, key, value, window, tombstone, output_mode, checkpoint, source_names
    )
