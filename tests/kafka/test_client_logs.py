"""librdkafka's repeated lines are logged once per window, with how many were held back:
a broker outage must not write a line per reconnect attempt (measured: 1,300 in 30 s from
one instance). The filter is checked on the lines librdkafka writes; the outage itself is
in `test_broker_faults.py`."""

from __future__ import annotations

import logging

from iqstate_kafka.client_logs import shape

from iqstate.repeated_lines import RepeatedLines

REFUSED = (
    "FAIL [rdkafka#consumer-{client}] [thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: "
    "Connect to ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT{extra})"
)


def record(line: str) -> logging.LogRecord:
    return logging.LogRecord("iqstate_kafka.client", logging.ERROR, "", 0, "%s", (line,), None)


def test_a_repeated_line_passes_once_per_window_with_the_count_held_back() -> None:
    now = [0.0]
    repeated = RepeatedLines(shape, window=30, clock=lambda: now[0])
    passed = []
    for step in range(100):  # a reconnect every 0.5 s for 50 s, from two clients
        now[0] = step * 0.5
        for client, extra in (("3", ""), ("6", f", {step} identical error(s) suppressed")):
            line = record(REFUSED.format(client=client, extra=extra))
            if repeated.filter(line):
                passed.append((now[0], line.getMessage()))
    assert [when for when, _ in passed] == [0.0, 30.0]
    assert passed[1][1].endswith("(119 more like it in the 30 s before)")  # 2 a step, 60 steps
    now[0] = 3600.0  # the same line an hour later: the count says over how long
    assert repeated.filter(late := record(REFUSED.format(client="3", extra="")))
    assert late.getMessage().endswith("(79 more like it in the 3570 s before)")
    other = record(REFUSED.format(client="3", extra="").replace("9092", "9093"))
    assert repeated.filter(other), "another broker's line is another shape"
