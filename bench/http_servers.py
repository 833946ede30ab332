"""The HTTP service under uvicorn (today's server) and under Granian, on the same routes.

Run: `.venv/bin/python bench/http_servers.py [--seconds 5] [--rounds 3] [--connections 16]`
(needs `wrk`, Debian's package, and `pip install granian`).

Each server runs the same ASGI app (`QueryService(app).asgi()`, a 4-partition memory store
of 10,000 keys) in a process of its own, one worker, on 127.0.0.1, with the same limits
where Granian has them (header read timeout 10 s; Granian has no body timeout, no idle
keep-alive timeout and no connection cap, which `ConnectionLimits` gives uvicorn):
- uvicorn: `iqstate_http.serve` as `iqstate serve` runs it (httptools, uvloop, the
  connection limits of `iqstate_http.protocol`);
- Granian: its ASGI interface, HTTP/1.1, `backpressure` 1,000, header read timeout 10 s.
`wrk` (1 thread, `--connections`) loads `GET /v1/stores/s/keys/<key>` and `POST /v1/query`
(a key query) for `--seconds` per round; servers alternate, best round of each counts.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

KEY = "user-00000042"
BODY = '{"store": "s", "query": {"type": "key", "key": "' + KEY + '"}}'
POST_SCRIPT = f"""wrk.method = "POST"
wrk.body = '{BODY}'
wrk.headers["Content-Type"] = "application/json"
"""


def make_asgi() -> Any:
    """The service's ASGI app over a fresh application (Granian's factory target)."""
    from iqstate_http import QueryService

    return QueryService(_application()).asgi()


def _application() -> Any:
    from iqstate import Application

    app = Application("servers", tempfile.mkdtemp(prefix="iqstate-bench-servers-"))
    app.key_value_store("s", 4, value_serde="string")
    app.start()
    with app.begin_batch(position={"src": {0: 1}}, batch_id=0) as batch:
        batch.put_all("s", [(f"user-{n:08d}", f"value-{n}") for n in range(10_000)])
    return app


def _serve(server: str, port: int) -> None:
    if server == "uvicorn":
        from iqstate_http import serve

        serve(_application(), port=port)
        return
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.server import Server

    Server(
        "http_servers:make_asgi",
        port=port,
        interface=Interfaces.ASGI,
        http=HTTPModes.http1,
        workers=1,
        backpressure=1000,
        http1_settings=HTTP1Settings(header_read_timeout=10_000),
        log_enabled=False,
        factory=True,
        working_dir=Path(__file__).parent,
    ).serve()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(server: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", server, "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/v1/stores/s/keys/{KEY}", timeout=1) as answer:
                if answer.status == 200:
                    return process, url
        except OSError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"{server} did not start")
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)


def _wrk(url: str, seconds: float, connections: int, script: Path | None) -> tuple[float, str]:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency"]
    if script is not None:
        command += ["-s", str(script)]
    output = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+(\S+)", output)
    return rate, p99.group(1) if p99 else "?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", choices=["uvicorn", "granian"])
    parser.add_argument("--port", type=int)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if args.serve:
        _serve(args.serve, args.port)
        return
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    script = Path(tempfile.mkdtemp()) / "post.lua"
    script.write_text(POST_SCRIPT)
    routes = {
        "GET key route": (f"/v1/stores/s/keys/{KEY}", None),
        "POST /v1/query": ("/v1/query", script),
    }
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for _ in range(args.rounds):
        for server in ("uvicorn", "granian"):
            process, url = _start(server)
            try:
                for route, (path, lua) in routes.items():
                    rate, p99 = _wrk(url + path, args.seconds, args.connections, lua)
                    if rate > best.get((server, route), (0.0, ""))[0]:
                        best[(server, route)] = (rate, p99)
            finally:
                _stop(process)
    print(
        f"wrk: 1 thread, {args.connections} connections, {args.seconds:g} s rounds, "
        f"best of {args.rounds}"
    )
    for route in routes:
        uvicorn_rate, uvicorn_p99 = best[("uvicorn", route)]
        granian_rate, granian_p99 = best[("granian", route)]
        print(
            f"  {route:<15} uvicorn {uvicorn_rate:9,.0f} req/s (p99 {uvicorn_p99}), "
            f"granian {granian_rate:9,.0f} req/s (p99 {granian_p99}): "
            f"granian/uvicorn {granian_rate / uvicorn_rate:.2f}"
        )


if __name__ == "__main__":
    main()
