"""The log of store failures that queries report as `STORE_EXCEPTION`.

A caller sees each failure in its answer; the operator sees it here, with its traceback:
one line per store partition, query type and exception type every 30 s (the next one says
how many were held back), so a store failing every query does not flood the log.
"""

from __future__ import annotations

import logging

from iqstate.repeated_lines import RepeatedLines

logger = logging.getLogger("iqstate.store_exceptions")


def repeats_of(line: str) -> str:
    """What the repeats of a line share: all before its message (store, partition, query
    type and exception type)."""
    return line.split(":", 1)[0]


logger.addFilter(RepeatedLines(repeats_of))


def log_store_exception(what: str, exc: BaseException) -> None:
    """Log that `what` ("store 'counts' partition 3 answering KeyQuery") raised `exc`."""
    logger.warning("%s failed (%s): %s", what, type(exc).__name__, exc, exc_info=exc)
