"""What the embedded demo and the distributed demo share: their options and their words."""

from __future__ import annotations

import argparse

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
        type=int,
        default=None,
        help="run this many word-count batches (one new input file each), then exit",
    )
    parser.add_argument("--duration", type=float, default=None, help="exit after this many seconds")
    parser.add_argument(
        "--files",
        type=int,
        default=None,
        help="write this many input files in all, then stop writing",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between input files")
    parser.add_argument("--lines", type=int, default=200, help="lines per input file")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--http-port",
        type=int,
        default=7070,
        help="port of the HTTP API (with iqstate-http); 0: any",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the progress line")
