"""docs/deployment.md as written: an install into an environment of one's own (no workspace,
no editable installs) serves; the systemd unit's command line is one `iqstate serve`
accepts; the container's health check tells ready from not."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from iqstate_http import start_background
from iqstate_http.plugin import iqstate_register_commands
from support.network import free_port

from iqstate import Application

ROOT = Path(__file__).parent.parent
PAGE = (ROOT / "docs" / "deployment.md").read_text()


def block(language: str, containing: str) -> str:
    for found in re.findall(rf"```{language}\n(.*?)```", PAGE, re.S):
        if containing in found:
            return str(found)
    raise AssertionError(f"no {language} block with {containing!r} in docs/deployment.md")


def test_the_systemd_unit_runs_a_command_iqstate_serve_accepts() -> None:
    unit = block("ini", "ExecStart=")
    command = re.search(r"ExecStart=(.*?)(?:\n(?!\s))", unit.replace("\\\n", " "), re.S)
    assert command is not None
    words = shlex.split(command.group(1))
    assert words[:2] == ["/opt/iqstate/bin/iqstate", "serve"]
    commands: dict[str, Any] = {}
    iqstate_register_commands(lambda name, _help, add, run: commands.setdefault(name, add))
    parser = argparse.ArgumentParser(prog="iqstate serve", exit_on_error=False)
    commands["serve"](parser)
    args = parser.parse_args(words[2:])
    assert args.cluster == "kafka-1:9092,kafka-2:9092" and args.log_format == "json"
    assert args.store == ["order-totals:key_value:12,engine=rocksdb,value_serde=json"]


def test_the_container_health_check_tells_ready_from_not(tmp_path: Path) -> None:
    check = block("dockerfile", "HEALTHCHECK").split('CMD python -c "', 1)[1].split('"\n', 1)[0]
    app = Application("health", tmp_path)
    app.key_value_store("s", 1)
    with app:
        server = start_background(app)
        try:
            probe = check.replace("127.0.0.1:7070", f"127.0.0.1:{server.port}")
            assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0
        finally:
            server.stop()
        gone = subprocess.run([sys.executable, "-c", probe], capture_output=True, check=False)
        assert gone.returncode != 0


@pytest.mark.iqstate_slow
def test_an_install_of_its_own_serves(tmp_path: Path) -> None:
    """`pip install ./core ./plugins/http` into a fresh venv, as the page says, then
    `iqstate serve` from that venv answers a key lookup."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(ROOT / "core"),
         str(ROOT / "plugins" / "http")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    (tmp_path / "orders_app.py").write_text(
        "from iqstate import Application\n"
        f"app = Application('orders', {str(tmp_path / 'state')!r})\n"
        "app.key_value_store('totals', 2)\n"
        "app.start()\n"
        "with app.begin_batch(position={'in': {0: 1}}, batch_id=1) as batch:\n"
        "    batch.put('totals', 'ada', 42)\n"
    )
    port = free_port()
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    process = subprocess.Popen(
        [str(venv / "bin" / "iqstate"), "serve", "orders_app:app", "--port", str(port)],
        cwd=tmp_path, env={**environment, "PYTHONPATH": str(tmp_path)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/v1/stores/totals/keys/ada", timeout=2)
                break
            except httpx.HTTPError:
                assert process.poll() is None, process.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the installed iqstate serve did not start"
                time.sleep(0.2)
        assert answer.json()["value"] == 42
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "iqstate==" in listed and "iqstate-http==" in listed
    assert "iqstate-kafka" not in listed, "only what was asked for is installed"
