"""librdkafka's log lines, each shape once per window while it repeats
(`iqstate.repeated_lines.RepeatedLines` with `shape`).

While a broker is down every client reconnects on its own schedule and logs each failed
attempt: measured with one serving instance and its broker stopped, its two changelog and
members consumers logged `Connect to ... failed: Connection refused` every 35-50 ms, 1,300
lines in 30 s (millions a day of an outage, in a log shipper). `RepeatedLines` lets the
first line of each shape through, holds back the same shape for `window` seconds, then lets
the next one through saying how many it held back. A shape is the line without what
changes between repeats: the client's instance name and librdkafka's own
`(after 0ms in state CONNECT, 5 identical error(s) suppressed)`.
"""

from __future__ import annotations

import re

_CLIENT = re.compile(r"rdkafka#(\w+)-\d+")
_TIMING = re.compile(r"\s*\(after \d+ms in state \w+(, \d+ identical error\(s\) suppressed)?\)")


def shape(line: str) -> str:
    """`line` without what changes from one repeat to the next."""
    return _TIMING.sub("", _CLIENT.sub(r"rdkafka#\1", line))
