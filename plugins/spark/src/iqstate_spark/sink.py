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
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from iqstate import Application
from iqstate.errors import IqstateError
from iqstate.runtime.spec import WindowStoreSpec
from iqstate_spark.cluster_stores import ClusterStores
from iqstate_spark.offsets import running_batch_position
from iqstate_spark.sink_arguments import OutputMode, check_sink_arguments
from iqstate_spark.stopping import interrupted_by_stop

if TYPE_CHECKING:
    from iqstate.runtime import Batch
    from iqstate_spark.distributed import ClusterSink


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
        *,
        timestamp: str | None = None,
        session: str | None = None,
        allow_gaps: bool = False,
    ) -> None:
        spec = app.stores.get(store)
        checked = check_sink_arguments(
            store=store,
            store_type=None if spec is None else spec.store_type,
            declared=app.stores.keys(),
            declared_by="the application",
            key=key,
            value=value,
            window=window,
            tombstone=tombstone,
            timestamp=timestamp,
            session=session,
            output_mode=output_mode,
            modes=("append", "update", "complete"),
            checkpoint=checkpoint,
            source_names=source_names,
            window_size_ms=spec.window_size_ms if isinstance(spec, WindowStoreSpec) else None,
        )
        self.app, self.store = app, store
        self.columns, self.output_mode = checked.columns, checked.output_mode
        self.checkpoint, self.source_names = checked.checkpoint, checked.source_names
        self.last_batch: tuple[int, int] | None = None
        """`(batch_id, rows)` of the last micro-batch written, for progress reports."""
        self._allow_gaps = allow_gaps
        # A query's batches start at 0: a store partition with none of them yet that gets
        # a later one lost what the query wrote before (in complete mode each batch is the
        # whole result, so nothing is missing).
        self._first_batch_id = None if output_mode == "complete" or allow_gaps else 0

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        position = running_batch_position(batch_df, batch_id, self.checkpoint, self.source_names)
        with interrupted_by_stop(batch_df, self.store, batch_id):
            table: pa.Table = batch_df.toArrow()
        self.columns.check(table.column_names)
        keys = self.columns.keys(table)
        values = self.columns.values(table)
        times = self.columns.times(table)
        with self.app.begin_batch(
            position=position,
            batch_id=batch_id,
            stores=[self.store],
            allow_gaps=self._allow_gaps,
            first_batch_id=self._first_batch_id,
        ) as batch:
            if self.output_mode == "complete":
                self._delete_removed(batch, keys, times)
            self._put(batch, keys, values, times)
        self.last_batch = (batch_id, table.num_rows)

    def _put(
        self, batch: Batch, keys: list[Any], values: list[Any], times: list[Any] | None
    ) -> None:
        """The batch's rows, with the times the store's type takes (one loop per batch)."""
        store, columns = self.store, self.columns
        if times is None:
            batch.put_all(store, zip(keys, values, strict=True))
        elif columns.window is not None:
            batch.put_all_windows(store, zip(keys, times, values, strict=True))
        elif columns.session is not None:
            for key, session, value in zip(keys, times, values, strict=True):
                batch.put(store, key, value, session=session)
        else:
            for key, timestamp, value in zip(keys, times, values, strict=True):
                batch.put(store, key, value, timestamp=timestamp)

    def _delete_removed(self, batch: Batch, keys: list[Any], times: list[Any] | None) -> None:
        """In complete mode the batch is the whole result: keys (of a session store:
        sessions, which get new bounds as they grow or merge) not in it were removed."""
        if times is None:  # a key-value store: the bulk path
            batch.put_all(self.store, [(key, None) for key in self._stored_keys() - set(keys)])
            return
        if self.columns.session is None:  # a timestamped store
            for key in self._stored_keys() - set(keys):
                batch.delete(self.store, key)
            return
        for key, session in self._stored_sessions() - set(zip(keys, times, strict=True)):
            batch.delete(self.store, key, session=session)

    def _stored_keys(self) -> set[Any]:
        from iqstate import QueryableStoreTypes, StoreQueryParameters

        current = self.app.store(
            StoreQueryParameters.from_name_and_type(
                self.store, QueryableStoreTypes.key_value_store()
            )
        )
        with current.all() as pairs:
            return {key for key, _ in pairs}

    def _stored_sessions(self) -> set[tuple[Any, tuple[int, int]]]:
        from iqstate import StateQueryRequest, WindowRangeQuery

        # Every start a session can have (int64 milliseconds).
        every_session: WindowRangeQuery[Any, Any] = WindowRangeQuery.with_window_start_range(
            -(1 << 63), (1 << 63) - 1
        )
        result = self.app.query(StateQueryRequest.in_store(self.store).with_query(every_session))
        stored: set[tuple[Any, tuple[int, int]]] = set()
        for answer in result.partition_results.values():
            if answer.is_failure:
                raise IqstateError(
                    f"to_store({self.store!r}): complete mode could not read the stored "
                    f"sessions: {answer.failure_message}"
                )
            with answer.result as sessions:
                stored.update(
                    (window.key, (window.start_ms, window.end_ms)) for window, _ in sessions
                )
        return stored


def to_store(
    target: Application | ClusterStores,
    store: str,
    key: str,
    value: str | Sequence[str] | None = None,
    *,
    window: str | None = None,
    tombstone: str | None = None,
    timestamp: str | None = None,
    session: str | None = None,
    output_mode: OutputMode = "update",
    checkpoint: str | Path | None = None,
    source_names: Sequence[str] | None = None,
    allow_gaps: bool = False,
) -> StoreSink | ClusterSink:
    """A `foreachBatch` function writing each micro-batch into `store`, exactly once.

    `target` is an `Application` (embedded mode: the driver writes into its stores) or a
    `ClusterStores` (distributed mode: Spark's executors write the store's changelog topic,
    which the serving instances follow; see `iqstate_spark.distributed`).
    `key` names the key column; `value` the value column (a list of columns makes a dict
    value; omitted, every other column but those named). A null value deletes the key (a
    versioned store: writes a tombstone version); so does a true `tombstone` column. The
    store's type decides which column of times a row needs, in epoch milliseconds:
    - window stores: the window start, from the `window` column (default `window`, the
      struct `F.window` makes);
    - timestamped and versioned stores: the event time, from the `timestamp` column (a
      timestamp, or an integer taken as epoch milliseconds), which must be named;
    - session stores: the session's start and end, from the `session` column (default
      `session_window`, the struct `F.session_window` makes).
    `output_mode="complete"` (embedded mode only; not for window or versioned stores) makes
    the store equal to each batch (keys, or sessions, missing from the batch are deleted). The
    batch's position is read from the query's checkpoint (found automatically; pass
    `checkpoint` when the query is not in this process's default session).
    In embedded mode a batch that finds a partition of the store without the query's
    earlier batches (a store in memory restarted, a deleted state directory, a store added
    to a running query) raises `BatchGapError` and writes nothing; `allow_gaps=True`
    accepts such a store, holding the batches from there on (and batch ids that skip).
    In distributed mode the first batch a sink writes, unless it is batch 0, raises
    `BatchGapError` when the store's changelog holds no batch (deleted and made again, or
    another application id): the earlier batches are in no changelog; `allow_gaps=True`
    serves the store from that batch on.
    """
    if isinstance(target, ClusterStores):
        # Imported here: distributed mode needs iqstate-kafka, embedded mode does not.
        from iqstate_spark.distributed import ClusterSink

        return ClusterSink(
            target, store, key, value, window, tombstone, output_mode, checkpoint, source_names,
            timestamp=timestamp, session=session, allow_gaps=allow_gaps,
        )  # fmt: skip
    if not isinstance(target, Application):
        raise TypeError(
            "to_store: the target must be an iqstate Application (embedded mode) or "
            f"iqstate_spark.ClusterStores (distributed mode), got {type(target).__name__}"
        )
    return StoreSink(
        target, store, key, value, window, tombstone, output_mode, checkpoint, source_names,
        timestamp=timestamp, session=session, allow_gaps=allow_gaps,
    )  # fmt: skip
