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

`interrupted_by_stop` turns exactly that case (the query's own job group cancelled, or an
interruption) into `QueryStopped`, raised without its long cause: a short message in the
form Spark's pattern recognises, so the query ends as "Stopped" with no error. The batch
still fails, so Spark never commits it: it runs again, with the same id and offsets, when
the query restarts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from iqstate.errors import IqstateError

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
        job_group = batch_df.sparkSession.sparkContext.getLocalProperty("spark.jobGroup.id")
        if not _stopped(str(error), job_group):
            raise
        raise QueryStopped(
            f"batch {batch_id} of store {store!r} was not written: its query was stopped "
            "(Spark's stop signal: py4j.protocol.Py4JJavaError: An error occurred while "
            f"calling the batch's Spark job: {INTERRUPTIONS[0]})"
        ) from None


def _stopped(text: str, job_group: str | None) -> bool:
    """Spark's own test (`isInterruptionException`): an interruption, or a cancellation of
    the query's job group (only `stop()` cancels it; the group is the query's run id)."""
    if any(name in text for name in INTERRUPTIONS):
        return True
    return job_group is not None and "cancelled" in text and job_group in text
