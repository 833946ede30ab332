"""What recording `/metrics` costs on the hot paths, against the same paths not recording.

Run: `.venv/bin/python bench/metrics_cost.py [--keys 100000] [--lookups 50000] [--repeat 7]`.

A memory key-value store of `--keys` string keys over 4 partitions, and the HTTP service's
ASGI app (`QueryService.asgi()`) called directly in this process (no sockets: the recording
is what is measured, not the network):
- `app.query` of a `KeyQuery`, against `ServiceMetrics.query` (the same call, counted and
  timed), which the key route and `POST /v1/query` use for their local answers;
- `GET /v1/stores/{store}/keys/{key}` through the service, recording as it does, against
  the same service with recording replaced by no-ops.
- with `--http`: the key route over loopback HTTP, the service under uvicorn (httptools,
  uvloop) in this process and `wrk` (1 thread, 16 connections, 5 s rounds) loading it,
  recording on and off alternately.
Rounds alternate; the best of `--repeat` rounds of each counts. Prints microseconds per
call (requests per second over HTTP) and the added cost in percent (target: at most 5%).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import socket
import subprocess
import tempfile
import threading
import time
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
    over_http: dict[str, list[float]] = {"off": [], "on": []}
    if args.http:
        for _ in range(args.repeat):
            for label in ("off", "on"):
                set_recording(label == "on")
                over_http[label].append(_wrk_rate(service.asgi(), lookups[0]))
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
        off, on = max(over_http["off"]), max(over_http["on"])
        print(
            f"  {'key route over HTTP (wrk)':<30} without {off:8,.0f} req/s, with {on:8,.0f} "
            f"req/s: {(off / on - 1) * 100:+.1f}% time per request"
        )


def _wrk_rate(asgi: Any, key: str, seconds: int = 5) -> float:
    """Requests per second `wrk` gets from `asgi` served by uvicorn on a free port."""
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
        output = subprocess.run(
            ["wrk", "-t1", "-c16", f"-d{seconds}s", f"http://127.0.0.1:{port}/v1/stores/s/keys/{key}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    return float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
