"""Key lookups through the HTTP service against a bare endpoint in the same ASGI stack.

Both servers are Starlette on uvicorn in this process (one at a time under load); the load
comes from `wrk` (Debian's package) in its own process, with a fixed duration and
connection count, on 127.0.0.1. Each request looks a random one of 10,000 keys up:

* iqstate: `GET /v1/stores/s/keys/<key>` (an IQv2 `KeyQuery` through `app.query`);
* bare: `GET /bare/<key>` returning a dict look-up as JSON.

    python bench/http_service.py [--seconds 5] [--connections 16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import iqstate_http
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from timing import calibration_line

from iqstate import Application

KEYS = 10_000
LUA = """
request = function()
  return wrk.format("GET", "{prefix}" .. "key-" .. math.random(0, {last}))
end
"""


def bare_server(values: dict[str, str]) -> tuple[str, uvicorn.Server, threading.Thread]:
    async def lookup(request: Request) -> JSONResponse:
        return JSONResponse({"value": values.get(request.path_params["key"])})

    config = uvicorn.Config(
        Starlette(routes=[Route("/bare/{key}", lookup)]),
        host="127.0.0.1", port=0, log_level="warning", access_log=False,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", server, thread


def load(url: str, prefix: str, seconds: int, connections: int) -> dict[str, Any]:
    script = Path(tempfile.mkdtemp()) / "keys.lua"
    script.write_text(LUA.format(prefix=prefix, last=KEYS - 1))
    output = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]

    def percentile(label: str) -> float:
        value, unit = re.search(rf"{label}%\s+([\d.]+)(us|ms|s)", output).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return {"rate": rate, "p50": percentile("50"), "p99": percentile("99"),
            "errors": int(errors.group(1)) if errors else 0}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench/http_service.py needs wrk: apt-get install wrk")
    values = {f"key-{i}": f"value-{i}" for i in range(KEYS)}
    app = Application("bench-http", tempfile.mkdtemp(prefix="iqstate-bench-http-"))
    app.key_value_store("s", 4, value_serde="string")
    app.start()
    with app.begin_batch(position={"src": {0: 1}}, batch_id=1) as batch:
        batch.put_all("s", values.items())

    # Both servers run throughout (idle when not under load); interleaved rounds, best of
    # each, so a busy moment on the machine does not decide the ratio.
    service = iqstate_http.start_background(app)
    url, bare, thread = bare_server(values)
    rounds = [
        (
            load(service.url, "/v1/stores/s/keys/", args.seconds, args.connections),
            load(url, "/bare/", args.seconds, args.connections),
        )
        for _ in range(args.rounds)
    ]
    service.stop()
    bare.should_exit = True
    thread.join(timeout=10)
    app.close()
    iqstate = max((r[0] for r in rounds), key=lambda result: result["rate"])
    baseline = max((r[1] for r in rounds), key=lambda result: result["rate"])

    print(calibration_line())
    print(
        f"wrk: 1 thread, {args.connections} connections, {args.seconds} s, {KEYS:,} random keys, "
        f"best of {args.rounds} interleaved rounds"
    )
    for label, result in (("bare endpoint", baseline), ("iqstate key lookup", iqstate)):
        print(
            f"  {label:<20} {result['rate']:>9,.0f} req/s   p50 {result['p50']:6.2f} ms   "
            f"p99 {result['p99']:6.2f} ms   errors {result['errors']}"
        )
    ratio = baseline["rate"] / iqstate["rate"]
    print(f"  overhead: {ratio:.2f}x the bare endpoint's time per request")


if __name__ == "__main__":
    main()
