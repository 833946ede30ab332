"""Running streaming queries from a script until Ctrl-C or SIGTERM, and stopping them
without a flood of traces.

PySpark installs a Ctrl-C handler of its own that cancels every running Spark job from the
signal handler, while the main thread waits in `query.awaitTermination()` on the same
Py4J connection: a script stopped that way prints pages of Py4J and Java traces (measured:
90 lines for one Ctrl-C) and its last batch fails. `run_until_stopped` waits for the
queries itself and stops them on the first signal; a batch cut short is not committed by
Spark and runs again, with the same id, when the query restarts (exactly once).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

POLL_SECONDS = 0.2
"""How often the queries are checked: also how long a stop request may wait to be seen."""


class StopSignals:
    """Ctrl-C and SIGTERM set `requested` instead of interrupting the main thread.

    A second Ctrl-C raises `KeyboardInterrupt` as usual, to stop at once. Signals reach
    only the main thread: entered elsewhere, nothing is installed and `requested` is set
    only by the caller.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()


def run_until_stopped(*queries: Any) -> None:
    """Wait while the streaming `queries` run; on Ctrl-C or SIGTERM stop them all and return.

    What `query.awaitTermination()` is for a script, with a quiet stop (see the module
    docstring). Returns also when every query has ended by itself. A query that fails
    raises its error (Spark's `StreamingQueryException`), the others stopped first.
    """
    if not queries:
        raise ValueError("run_until_stopped needs at least one streaming query")
    with StopSignals() as signals:
        try:
            while not signals.requested.wait(POLL_SECONDS):
                ended = not any(query.isActive for query in queries)
                for query in queries:  # after isActive: a query that just failed is seen
                    failure = query.exception()
                    if failure is not None:
                        raise failure
                if ended:
                    return
        finally:
            for query in queries:
                query.stop()
