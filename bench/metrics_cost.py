"""What recording `/metrics` costs on the hot paths, against the same paths not recording.

Run: `.venv/bin/python bench/metrics_cost.py [--keys 100000] [--lookups 50000] [--repeat 7]`.

A memory key-value store of `--keys` string keys over 4 partitions, and the HTTP service's
ASGI app (`QueryService.asgi()`) called directly in this process (no sockets: the recording
is what is measured, not the network):
- `app.query` of a `KeyQuery`, against `ServiceMetrics.query` (the same call, counted and
  timed), which the key route and `POST /v1/query` use for their local answers;
- `GET /v1/stores/{store}/keys/{key}` through the service, recording as it does, against
  the same service with recording replaced by no-ops (the key route's count of its `200`
  answers, one integer incremented on the event loop, stays on in both).
- with `--http`: the key route over loopback HTTP, the service under uvicorn (httptools,
  uvloop) started once in this process, and `wrk` (1 thread, 16 connections,
  `--http-seconds` rounds) loading it, recording switched on and off between rounds, in
  pairs (the order swapped every other pair). Loopback throughput wanders by a few percent
  from round to round, so the figure is the median of the pairs' ratios, with their range;
  beside it, the in-process added time as a share of an HTTP request's time.
Rounds alternate; in process the best of `--repeat` rounds of each counts. Prints
microseconds per call (requests per second over HTTP) and the added cost in percent
(target: at most 5%).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from iqstate_http import QueryService
from timing import calibration_line

from iqstate import Application, KeyQuery, StateQueryRequest


def best_of(rounds: list[float]) -> float:
    return min(rounds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--lookups", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--http", action="store_true", help="also over HTTP, loaded by wrk")
    parser.add_argument("--http-seconds", type=int, default=3, help="length of a wrk round")
    args = parser.parse_args()
    app = Application("metrics-bench", tempfile.mkdtemp(prefix="iqstate-bench-"))
    app.key_value_store("s", 4, value_serde="string")
    app.start()
    keys = [f"user-{n:08d}" for n in range(args.keys)]
    with app.begin_batch(position={"src": {0: 1}}, batch_id=0) as batch:
        batch.put_all("s", [(key, f"value-{key}") for key in keys])
    lookups = random.Random(5).choices(keys, k=args.lookups)
    requests = [StateQueryRequest.in_store("s").with_query(KeyQuery.with_key(k)) for k in lookups]
    service = QueryService(app)
    metrics = service.metrics
    asgi = service.asgi()
    scopes = [
        {
            "type": "http",
            "method": "GET",
            "path": f"/v1/stores/s/keys/{key}",
            "raw_path": f"/v1/stores/s/keys/{key}".encode(),
            "query_string": b"",
            "headers": [],
            "root_path": "",
        }
        for key in lookups
    ]

    def queries(ask: Any) -> float:
        started = time.perf_counter()
        for request in requests:
            ask(request)
        return (time.perf_counter() - started) / len(requests)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        return None

    async def routes() -> float:
        started = time.perf_counter()
        for scope in scopes:
            await asgi(scope, receive, send)
        return (time.perf_counter() - started) / len(scopes)

    recording = (metrics.query, metrics.record_request)

    def set_recording(on: bool) -> None:
        if on:
            metrics.query, metrics.record_request = recording  # type: ignore[method-assign]
        else:
            metrics.query = app.query  # type: ignore[method-assign]
            metrics.record_request = lambda route, status: None  # type: ignore[method-assign]

    times: dict[str, list[float]] = {name: [] for name in ("plain", "counted", "off", "on")}
    loop = asyncio.new_event_loop()
    for _ in range(args.repeat):
        times["plain"].append(queries(app.query))
        times["counted"].append(queries(recording[0]))
        set_recording(False)
        times["off"].append(loop.run_until_complete(routes()))
        set_recording(True)
        times["on"].append(loop.run_until_complete(routes()))
    loop.close()
    over_http: list[tuple[float, float]] = []  # (off, on) requests/s, one pair per round
    if args.http:
        with _served(service.asgi()) as url:
            target = f"{url}/v1/stores/s/keys/{lookups[0]}"
            for round_ in range(args.repeat):
                rates = {}
                for label in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
                    set_recording(label == "on")
                    rates[label] = _wrk_rate(target, args.http_seconds)
                over_http.append((rates["off"], rates["on"]))
        set_recording(True)
    app.close()
    print(calibration_line())
    print(f"keys={args.keys} lookups={args.lookups} rounds={args.repeat} (best of each)")
    for label, base, measured in (
        ("app.query KeyQuery", "plain", "counted"),
        ("key route (ASGI, in process)", "off", "on"),
    ):
        without, with_ = best_of(times[base]), best_of(times[measured])
        print(
            f"  {label:<30} without {without * 1e6:6.2f} us, with {with_ * 1e6:6.2f} us: "
            f"+{(with_ - without) * 1e6:.2f} us ({(with_ / without - 1) * 100:+.1f}%)"
        )
    if args.http:
        added = sorted(off / on - 1 for off, on in over_http)
        off, on = (
            statistics.median(o for o, _ in over_http),
            statistics.median(o for _, o in over_http),
        )
        print(
            f"  {'key route over HTTP (wrk)':<30} without {off:8,.0f} req/s, with {on:8,.0f} "
            f"req/s (medians): {statistics.median(added) * 100:+.1f}% time per request, "
            f"median of {len(added)} paired rounds (range {added[0] * 100:+.1f}% to "
            f"{added[-1] * 100:+.1f}%)"
        )
        in_process = best_of(times["on"]) - best_of(times["off"])
        print(
            f"  {'in-process added time':<30} {in_process * 1e6:.2f} us of the {1e6 / off:.1f} us "
            f"an HTTP request takes: {in_process * off * 100:+.1f}%"
        )


@contextlib.contextmanager
def _served(asgi: Any) -> Iterator[str]:
    """`asgi` under uvicorn (httptools, uvloop) on a free loopback port, as its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(asgi, port=port, log_config=None, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _wrk_rate(url: str, seconds: int) -> float:
    """Requests per second `wrk` (1 thread, 16 connections) gets from `url`."""
    output = subprocess.run(
        ["wrk", "-t1", "-c16", f"-d{seconds}s", url], capture_output=True, text=True, check=True
    ).stdout
    return float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
