"""What recording `/metrics` costs on the hot paths, against the same paths not recording.

Run: `.venv/bin/python bench/metrics_cost.py [--keys 100000] [--lookups 50000] [--repeat 7]`.

A memory key-value store of `--keys` string keys over 4 partitions, and the HTTP service's
ASGI app (`QueryService.asgi()`) called directly in this process (no sockets: the recording
is what is measured, not the network):
- `app.query` of a `KeyQuery`, against `ServiceMetrics.query` (the same call, counted and
  timed), which the key route and `POST /v1/query` use for their local answers;
- `GET /v1/stores/{store}/keys/{key}` through the service, recording as it does, against
  the same service with recording replaced by no-ops.
Rounds alternate; the best of `--repeat` rounds of each counts. Prints microseconds per
call and the added cost in percent (target: at most 5%).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from typing import Any

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


if __name__ == "__main__":
    main()
