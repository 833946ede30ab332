"""A micro-batch cut short by `query.stop()`, reported to Spark in the form it recognises.

`StreamingQuery.stop()` cancels the query's running Spark jobs. A `foreachBatch` function
in Python sees that as a `Py4JJavaError` whose text is the whole Java stack trace (10 kB
and more). Spark passes it back to the stream thread, which tells a stop from a failure by
matching the text against `py4j.protocol.Py4JJavaError: An error occurred while
calling((.|\\r\\n|\\r|\\n)*)(java.lang.InterruptedException|...)` (`StreamExecution.
PROXY_ERROR`). That pattern recurses once per character: on such a text the stream thread
dies of a `java.lang.StackOverflowError` in `java.util.regex`, its status stays
"Processing new data", and the trace lands on the driver's stderr. Any PySpark
`foreachBatch` stopped during a job does this; nothing grows from batch to batch.

`interrupted_by_stop` turns exactly that case into `QueryStopped`: an error of a batch whose
query is no longer active (`stop()` marks it terminated before it cancels its jobs) and
whose text says it was cancelled with the query's job group, or interrupted. It is raised
without its long cause (which is logged), with a short message in the form Spark's pattern
recognises, so the query ends as "Stopped" with no error. Any other error passes unchanged.
The batch fails either way, so Spark never commits it: it runs again, with the same id and
offsets, when the query restarts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from iqstate.errors import IqstateError

logger = logging.getLogger("iqstate_spark.stopping")

INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)
"""The Java exceptions Spark counts as an interruption by `stop()` (`IO_EXCEPTION_NAMES`)."""


class QueryStopped(IqstateError):
    """A sink's micro-batch did not complete because its streaming query was stopped."""


@contextmanager
def interrupted_by_stop(batch_df: Any, store: str, batch_id: int) -> Iterator[None]:
    """Run a micro-batch's Spark work; a cancellation by the query's `stop()` becomes
    `QueryStopped` (see the module docstring). Every other error passes unchanged."""
    try:
        yield
    except Exception as error:
        if not stopped_by_query(batch_df, str(error)):
            raise
        logger.info("batch %d of store %r cut short by stop(): %s", batch_id, store, error)
        raise QueryStopped(
            f"batch {batch_id} of store {store!r} was not written: its query was stopped "
            "(Spark's stop signal: py4j.protocol.Py4JJavaError: An error occurred while "
            f"calling the batch's Spark job: {INTERRUPTIONS[0]})"
        ) from None


def stopped_by_query(batch_df: Any, text: str) -> bool:
    """Whether an error with `text`, raised in `foreachBatch`, comes from the query's own
    `stop()`: the query is no longer active, and the error is an interruption or a
    cancellation of the query's job group (Spark's own test, `isInterruptionException`).
    False when that cannot be told (the JVM going away, no query found)."""
    interrupted = any(name in text for name in INTERRUPTIONS)
    if not interrupted and "cancelled" not in text:
        return False
    try:
        from pyspark.sql import SparkSession

        context = batch_df.sparkSession.sparkContext
        query_id = context.getLocalProperty("sql.streaming.queryId")
        job_group = context.getLocalProperty("spark.jobGroup.id")
        query = SparkSession.builder.getOrCreate().streams.get(query_id) if query_id else None
        stopping = query is not None and not query.isActive
    except Exception:
        return False
    return stopping and (interrupted or (job_group is not None and job_group in text))
