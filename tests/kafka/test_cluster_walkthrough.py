"""docs/cluster.md's "Try it on one machine" runs as written: `iqstate broker`, two `iqstate
serve --cluster` instances, the writer's Python, and queries through either instance (with
free loopback ports in place of the page's 9092, 7071 and 7072)."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.network import free_port

PAGE = Path(__file__).parents[2] / "docs" / "cluster.md"
SECTION = "## Try it on one machine"


def _blocks(kind: str) -> list[str]:
    """The `kind` code blocks of the walkthrough section, in order."""
    section = PAGE.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = []
    for chunk in section.split(f"```{kind}\n")[1:]:
        lines = chunk.split("```", 1)[0].splitlines()
        indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        blocks.append("\n".join(line[indent:] for line in lines))
    return blocks


def _command(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[0] == "iqstate", line
    return [sys.executable, "-m", "iqstate.cli", *words[1:]]


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/v1/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_the_walkthrough_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ports = {"9092": str(free_port()), "7071": str(free_port()), "7072": str(free_port())}

    def ours(text: str) -> str:
        for page_port, port in ports.items():
            text = text.replace(page_port, port)
        return text

    broker_block, serve_block, curl_block = (ours(block) for block in _blocks("bash"))
    [writer_block] = (ours(block) for block in _blocks("py"))
    monkeypatch.chdir(tmp_path)
    processes: list[subprocess.Popen[str]] = []

    def start(line: str, name: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            _command(line),
            stdout=subprocess.PIPE,
            stderr=(tmp_path / f"{name}.err").open("w"),
            text=True,
            cwd=tmp_path,
        )
        processes.append(process)
        return process

    try:
        broker = start(broker_block.strip(), "broker")
        assert broker.stdout is not None
        deadline = time.monotonic() + 180
        while "Kafka is running at" not in (line := broker.stdout.readline()):
            assert broker.poll() is None and time.monotonic() < deadline, line
        assert f"127.0.0.1:{ports['9092']}" in line

        urls = []
        for number, line in enumerate(serve_block.strip().splitlines()):
            url = "http://" + line.split("--application-server ")[1].split()[0]
            start(line, f"serve-{number}")
            _wait(f"{url} ready", lambda url=url: _ready(url), 90)
            urls.append(url)

        exec(compile(writer_block, "cluster.md walkthrough writer", "exec"), {})

        expected = {"o-1": {"total": 12}, "o-2": {"total": 30}}
        answers: dict[str, Any] = {}
        for line in curl_block.strip().splitlines():
            url = shlex.split(line)[-1]

            def answered(url: str = url) -> bool:
                response = httpx.get(url, timeout=5)
                answers[url] = response.json()
                if "/keys/" not in url:
                    return True
                return response.status_code == 200 and answers[url]["value"] is not None

            _wait(url, answered, 60)
        for key, value in expected.items():
            [answer] = [a for u, a in answers.items() if u.endswith(f"/keys/{key}")]
            assert answer["value"] == value
            assert answer["position"] == {"orders-in": {"0": 2}}
        [status] = [a for u, a in answers.items() if u.endswith("/v1/cluster")]
        live = {f"http://{s['host']}:{s['port']}" for s in status if s["live"]}
        assert live == set(urls)
    finally:
        for process in reversed(processes):  # Ctrl-C, as the page says
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        codes = []
        for process in processes:
            try:
                codes.append(process.wait(60))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append(process.wait())
    assert codes == [0, 0, 0]
    for name in ("broker", "serve-0", "serve-1"):
        assert "Traceback" not in (tmp_path / f"{name}.err").read_text(), name
