"""What the embedded demo and the distributed demo share: their options, their words, and
how they stop."""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from types import FrameType

from iqstate import arguments

_PR_SET_PDEATHSIG = 1
"""Linux's prctl option: the signal a process gets when its parent dies."""
WORKER_VARIABLE = "IQSTATE_DEMO_WORKER"
"""Set in the worker's environment: it runs the demo rather than supervising it."""

VOCABULARY = [
    "spark",
    "kafka",
    "stream",
    "state",
    "query",
    "partition",
    "position",
    "bound",
    "replica",
    "standby",
    "active",
    "window",
    "batch",
    "offset",
    "commit",
    "changelog",
    "rocksdb",
    "lmdb",
    "python",
    "arrow",
    "schema",
    "event",
    "record",
    "key",
    "value",
    "store",
    "lag",
    "host",
    "route",
    "session",
    "fence",
    "replay",
    "crash",
    "restart",
    "exactly",
    "once",
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "on",
    "with",
    "as",
    "by",
    "at",
]


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `iqstate demo` that both demos take."""
    parser.add_argument(
        "--dir", default="iqstate-demo", help="working directory (state, checkpoints, input)"
    )
    parser.add_argument(
        "--batches",
        type=arguments.at_least_one,
        default=None,
        help="run this many word-count batches (one new input file each), then exit",
    )
    parser.add_argument(
        "--duration", type=arguments.seconds, default=None, help="exit after this many seconds"
    )
    parser.add_argument(
        "--files",
        type=arguments.at_least_one,
        default=None,
        help="write this many input files in all, then stop writing",
    )
    parser.add_argument(
        "--interval", type=arguments.seconds, default=1.0, help="seconds between input files"
    )
    parser.add_argument(
        "--lines", type=arguments.at_least_one, default=200, help="lines per input file"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--http-port",
        type=arguments.port_or_any,
        default=7070,
        help="port of the HTTP API (with iqstate-http); 0: any",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the progress line")


def _dies_with(supervisor: int) -> Callable[[], None]:
    """What the worker runs before it starts, on Linux: it is killed when the supervisor
    dies, so that a SIGKILL of the command (or of its process group) ends the demo as a
    crash would, its JVM with it (PySpark's JVM exits when its Python process goes), and
    no worker is left running unsupervised."""

    def arrange() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != supervisor:  # it died before the line above took effect
                os._exit(1)

    return arrange


def supervised(work: Callable[[], int], argv: Sequence[str]) -> int:
    """Run `work` when this process is the demo's worker. Else run the worker (`iqstate`
    with `argv`, this command's arguments) in a session of its own and supervise it:
    SIGINT or SIGTERM, to the command or to its whole process group (Ctrl-C, `timeout`,
    systemd), reaches only this process, which turns the first into a request to stop
    (SIGTERM to the worker, which stops cleanly) and any later one into an immediate stop
    (SIGINT). Spark's JVM, in the worker's session, never gets the group's signal, which
    kills it mid-batch with Java traces. A SIGKILL of this process kills the worker too
    (`_dies_with`). Returns the worker's exit code (128 + the signal that ended it, as a
    shell says)."""
    if os.environ.get(WORKER_VARIABLE) == "1":
        return work()
    worker: subprocess.Popen[bytes] | None = None
    asked = 0

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal asked
        asked += 1
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM if asked == 1 else signal.SIGINT)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        worker = subprocess.Popen(
            [sys.executable, "-m", "iqstate.cli", *argv],
            env={**os.environ, WORKER_VARIABLE: "1"},
            start_new_session=True,
            preexec_fn=_dies_with(os.getpid()),
        )
        if asked:  # a signal came while it started
            worker.send_signal(signal.SIGTERM)
        code = worker.wait()
        return 128 - code if code < 0 else code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
