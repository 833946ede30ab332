"""PySpark's worker daemon, with Python workers that ignore SIGINT.

A Ctrl-C in a terminal goes to every process of the foreground process group: with
`local-cluster` executors that includes their Python workers, and PySpark's workers turn
SIGINT into `KeyboardInterrupt`, failing the running task and making Spark print a wall of
Java traces while the pipeline is stopping cleanly. PySpark keeps the JVMs out of it (they
ignore SIGINT); this daemon does the same for the workers. `cluster_session` names it in
`spark.python.daemon.module`. A worker still stops on SIGTERM and SIGKILL as before.
"""

from __future__ import annotations

import signal
from typing import Any

from pyspark import daemon


class _SignalsKeepingSigintIgnored:
    """The `signal` module as `pyspark.daemon` sees it: setting a SIGINT handler ignores
    SIGINT instead; everything else is the real module."""

    def __getattr__(self, name: str) -> Any:
        return getattr(signal, name)

    def signal(self, signum: int, handler: Any) -> Any:
        if signum == signal.SIGINT:
            handler = signal.SIG_IGN
        return signal.signal(signum, handler)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    daemon.signal = _SignalsKeepingSigintIgnored()  # type: ignore[attr-defined,assignment]
    daemon.manager()
