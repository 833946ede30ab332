"""Key lookups through the HTTP service against other endpoints in the same ASGI stack.

Every server is Starlette on uvicorn in this process (one at a time under load); the load
comes from `wrk` (Debian's package) in its own process, with a fixed duration and
connection count, on 127.0.0.1. Two comparisons (`--compare`), rounds interleaved:

* `bare`: 10,000 keys in a 4-partition memory store, `GET /v1/stores/s/keys/<key>` (an
  IQv2 `KeyQuery` through `app.query`) against `GET /bare/<key>` returning a dict
  look-up as JSON;
* `redis`: `--redis-keys` 16-character keys with distinct ~100-byte JSON values
  (`bench/values.py`), in a 4-partition RocksDB store at its default options, against
  `GET /redis/<key>` reading the same JSON from Redis (Debian's `redis-server`, started
  here on a free loopback port without persistence and stopped by its PID at the end)
  through the asyncio client of `redis` (with hiredis), returning it wrapped as
  `{"key": ..., "value": ...}`; each request asks for a random one of all the keys.

    python bench/http_service.py [--compare bare redis] [--seconds 5] [--connections 16]
        [--rounds 5] [--redis-keys 1000000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import iqstate_http
import redis
import redis.asyncio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from timing import calibration_line
from values import records

from iqstate import Application

KEYS = 10_000
LUA = """
request = function()
  return wrk.format("GET", "{prefix}" .. "key-" .. math.random(0, {last}))
end
"""
LUA_KEY_FILE = """
local keys = {{}}
for line in io.lines("{path}") do keys[#keys + 1] = line end
request = function()
  return wrk.format("GET", "{prefix}" .. keys[math.random(#keys)])
end
"""


def run_server(app: Starlette) -> tuple[str, uvicorn.Server, threading.Thread]:
    """`app` on uvicorn in a daemon thread on a free loopback port: its URL, server, thread."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", server, thread


def bare_server(values: dict[str, str]) -> tuple[str, uvicorn.Server, threading.Thread]:
    async def lookup(request: Request) -> JSONResponse:
        return JSONResponse({"value": values.get(request.path_params["key"])})

    return run_server(Starlette(routes=[Route("/bare/{key}", lookup)]))


def redis_endpoint(port: int) -> tuple[str, uvicorn.Server, threading.Thread]:
    """`GET /redis/{key}`: the JSON Redis holds under `key`, as `{"key": ..., "value": ...}`."""
    clients: list[Any] = []

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        clients.append(redis.asyncio.Redis(host="127.0.0.1", port=port))
        yield
        await clients.pop().aclose()

    async def lookup(request: Request) -> Response:
        key = request.path_params["key"]
        value = await clients[0].get(key)
        if value is None:
            return JSONResponse({"error": f"no key {key!r}"}, status_code=404)
        body = b'{"key":' + json.dumps(key).encode() + b',"value":' + value + b"}"
        return Response(body, media_type="application/json")

    return run_server(Starlette(routes=[Route("/redis/{key}", lookup)], lifespan=lifespan))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_redis() -> tuple[subprocess.Popen[bytes], int]:
    """`redis-server` on a free loopback port, without persistence; waits until it answers."""
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise SystemExit(f"redis-server did not start on port {port}") from None
            time.sleep(0.05)
    client.close()
    return process, port


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """End the process this bench started, by its PID."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def load(url: str, prefix: str, seconds: int, connections: int, lua: str = "") -> dict[str, Any]:
    script = Path(tempfile.mkdtemp()) / "keys.lua"
    script.write_text(lua or LUA.format(prefix=prefix, last=KEYS - 1))
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


def compare_bare(args: argparse.Namespace) -> None:
    """The memory store's key route against a dict look-up in the same stack."""
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
    print(
        f"\nbare: wrk 1 thread, {args.connections} connections, {args.seconds} s, {KEYS:,} "
        f"random keys, best of {args.rounds} interleaved rounds"
    )
    report([("bare endpoint", baseline), ("iqstate key lookup", iqstate)])
    ratio = baseline["rate"] / iqstate["rate"]
    print(f"  overhead: {ratio:.2f}x the bare endpoint's time per request")


def compare_redis(args: argparse.Namespace) -> None:
    """The RocksDB store's key route at default options against Starlette reading Redis."""
    if shutil.which("redis-server") is None:
        raise SystemExit("bench/http_service.py --compare redis needs apt-get install redis-server")
    pairs = records(args.redis_keys, "json", random.Random(13))
    root = Path(tempfile.mkdtemp(prefix="iqstate-bench-http-redis-"))
    key_file = root / "keys.txt"
    key_file.write_text("".join(f"{key}\n" for key, _ in pairs))
    app = Application("bench-http", root / "state")
    app.key_value_store("s", 4, engine="rocksdb", key_serde="string", value_serde="json")
    app.start()
    for number, first in enumerate(range(0, len(pairs), 10_000)):
        with app.begin_batch(position={"src": {0: number}}, batch_id=number) as batch:
            batch.put_all("s", pairs[first : first + 10_000])
    process, port = start_redis()
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        for first in range(0, len(pairs), 10_000):
            client.mset(
                {
                    key: json.dumps(value, separators=(",", ":"))
                    for key, value in pairs[first : first + 10_000]
                }
            )
        assert client.dbsize() == len(pairs)
        client.close()
        first_pair = pairs[0]
        del pairs
        service = iqstate_http.start_background(app)
        url, endpoint, thread = redis_endpoint(port)
        probe_key, probe_value = first_pair
        for address in (f"{service.url}/v1/stores/s/keys/{probe_key}", f"{url}/redis/{probe_key}"):
            with urllib.request.urlopen(address) as response:
                assert json.loads(response.read())["value"] == probe_value, address
        iqstate_lua = LUA_KEY_FILE.format(path=key_file, prefix="/v1/stores/s/keys/")
        redis_lua = LUA_KEY_FILE.format(path=key_file, prefix="/redis/")
        rounds = [
            (
                load(service.url, "", args.seconds, args.connections, iqstate_lua),
                load(url, "", args.seconds, args.connections, redis_lua),
            )
            for _ in range(args.rounds)
        ]
        service.stop()
        endpoint.should_exit = True
        thread.join(timeout=10)
    finally:
        stop_process(process)
        app.close()
        shutil.rmtree(root, ignore_errors=True)
    iqstate = max((r[0] for r in rounds), key=lambda result: result["rate"])
    baseline = max((r[1] for r in rounds), key=lambda result: result["rate"])
    print(
        f"\nredis: wrk 1 thread, {args.connections} connections, {args.seconds} s, "
        f"{args.redis_keys:,} keys with JSON values, every request a random key, best of "
        f"{args.rounds} interleaved rounds; iqstate: RocksDB, 4 partitions, default options"
    )
    report([("Starlette + Redis", baseline), ("iqstate key route", iqstate)])
    print(f"  iqstate / Redis endpoint throughput: {iqstate['rate'] / baseline['rate']:.2f}")
    for number, (ours, theirs) in enumerate(rounds, 1):
        print(f"    round {number}: iqstate {ours['rate']:>9,.0f}   redis {theirs['rate']:>9,.0f}")


def report(results: list[tuple[str, dict[str, Any]]]) -> None:
    for label, result in results:
        print(
            f"  {label:<20} {result['rate']:>9,.0f} req/s   p50 {result['p50']:6.2f} ms   "
            f"p99 {result['p99']:6.2f} ms   errors {result['errors']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--compare", nargs="+", choices=["bare", "redis"], default=["bare", "redis"]
    )
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis-keys", type=int, default=1_000_000)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("bench/http_service.py needs wrk: apt-get install wrk")
    print(calibration_line())
    if "bare" in args.compare:
        compare_bare(args)
    if "redis" in args.compare:
        compare_redis(args)


if __name__ == "__main__":
    main()
