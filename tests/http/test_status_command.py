"""`iqstate status URL`: the cluster as tables, in a real terminal (a pseudo-terminal)."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from iqstate_http import start_background
from iqstate_http.status import render
from rich.console import Console
from support.network import free_port

from iqstate import Application

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def as_text(renderable: Any) -> str:
    console = Console(record=True, width=160, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_the_tables_show_roles_lags_and_instances_that_went_away() -> None:
    cluster = [
        {
            "host": "10.0.0.1",
            "port": 7070,
            "live": True,
            "departure": None,
            "replicas": [
                {"store": "counts", "partition": 0, "role": "RUNNING", "lag": 0},
                {"store": "counts", "partition": 1, "role": "RESTORING", "lag": 1200},
                {"store": "counts", "partition": 2, "role": "STANDBY", "lag": 30},
            ],
        },
        {
            "host": "10.0.0.2",
            "port": 7070,
            "live": True,
            "departure": None,
            "replicas": [
                {"store": "counts", "partition": 2, "role": "RUNNING", "lag": 0},
                {"store": "counts", "partition": 0, "role": "STANDBY", "lag": None},
            ],
        },
        {
            "host": "10.0.0.3",
            "port": 7070,
            "live": False,
            "departure": {"reason": "no heartbeat for 3 s", "seconds_ago": 12.5},
            "replicas": [],
        },
    ]
    health = {"status": "degraded", "state": "RUNNING", "broker_silence_s": 4.2}
    text = as_text(render("http://10.0.0.1:7070", health, cluster))
    assert "http://10.0.0.1:7070: degraded (RUNNING), Kafka last heard 4.2 s ago" in text
    rows = {
        line.split("│")[1].strip(): line
        for line in text.splitlines()
        if line.startswith("│ 10.0.0.")
    }
    first = [cell.strip() for cell in rows["10.0.0.1:7070"].split("│")[1:-1]]
    assert first == ["10.0.0.1:7070", "live", "1", "1", "0", "1", "1230"]
    second = [cell.strip() for cell in rows["10.0.0.2:7070"].split("│")[1:-1]]
    assert second[-1] == "?", "an unknown lag is shown as unknown, never as 0"
    gone = [cell.strip() for cell in rows["10.0.0.3:7070"].split("│")[1:-1]]
    assert gone == ["10.0.0.3:7070", "gone: no heartbeat for 3 s, 12.5 s ago", *["-"] * 5]
    partitions = {
        tuple(cell.strip() for cell in line.split("│")[1:3]): line
        for line in text.splitlines()
        if line.startswith("│ counts")
    }
    assert "10.0.0.1:7070 │ RUNNING" in partitions[("counts", "0")]
    assert "10.0.0.2:7070 (?)" in partitions[("counts", "0")]
    assert "RESTORING" in partitions[("counts", "1")]
    assert "10.0.0.1:7070 (30)" in partitions[("counts", "2")]


@pytest.fixture
def served(tmp_path: Any) -> Iterator[str]:
    app = Application("status", tmp_path)
    app.key_value_store("counts", 2, value_serde="int64")
    with app:
        server = start_background(app)
        try:
            yield server.url
        finally:
            server.stop()


def run_in_terminal(
    arguments: list[str],
    seconds: float,
    interrupt: bool,
    enough: Callable[[str], bool] = lambda _: False,
) -> tuple[int, str]:
    """Run `iqstate ...` with a pseudo-terminal as its stdout for `seconds`, or until what it
    wrote is `enough` (then SIGINT when `interrupt`); its exit code and what it wrote, escape
    codes removed."""
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        # As in a terminal, Ctrl-C is not ignored: a test run started in the background by
        # a non-interactive shell ignores SIGINT, and a child inherits that (measured: its
        # SigIgn had SIGINT set and it never ended after Ctrl-C). GNU env restores it and
        # execs the CLI (same process); a `preexec_fn` could deadlock a threaded parent.
        ["env", "--default-signal=INT", sys.executable, "-m", "iqstate.cli", *arguments],
        stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary,
        env={**os.environ, "COLUMNS": "160", "TERM": "xterm-256color"},
    )  # fmt: skip
    os.close(secondary)
    output = bytearray()

    def text() -> str:
        return ANSI.sub("", bytes(output).decode(errors="replace"))

    def read_until(deadline: float, done: Callable[[str], bool] | None = None) -> None:
        """Keep reading what it writes (a terminal that is not read blocks its writes, and
        a blocked write would keep it from ending) until it ends, what it wrote is `done`,
        or `deadline` passes."""
        while time.monotonic() < deadline and process.poll() is None:
            if done is not None and done(text()):
                return
            if select.select([primary], [], [], 0.1)[0]:
                try:
                    output.extend(os.read(primary, 65536))
                except OSError:
                    return

    try:
        read_until(time.monotonic() + seconds, enough)
        if interrupt and process.poll() is None:
            process.send_signal(signal.SIGINT)
        read_until(time.monotonic() + 30)  # returns early once the terminal closes
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"still running 30 s after SIGINT; {_process_state(process.pid)}; "
                f"it wrote:\n{text()}"
            )
        while select.select([primary], [], [], 0.2)[0]:
            try:
                chunk = os.read(primary, 65536)
            except OSError:
                break
            if not chunk:
                break
            output.extend(chunk)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(primary)
    return code, text()


def _process_state(pid: int) -> str:
    """What Linux says of a process that does not end: its state and signal masks (`SigIgn`:
    ignored) and its threads' names."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        threads = sorted(
            (task / "comm").read_text().strip() for task in Path(f"/proc/{pid}/task").iterdir()
        )
    except OSError as exc:
        return f"/proc unreadable: {exc}"
    wanted = ("State:", "SigBlk:", "SigIgn:", "SigCgt:")
    return f"{[line for line in status if line.startswith(wanted)]}, threads {threads}"


def test_status_renders_in_a_terminal(served: str) -> None:
    code, text = run_in_terminal(["status", served], 30, interrupt=False)
    assert code == 0, text
    port = served.rsplit(":", 1)[1]
    assert f"{served}: ok (RUNNING)" in text
    assert f"127.0.0.1:{port}" in text and "instances" in text and "partitions" in text
    assert text.count("RUNNING") >= 3  # the status line and both partitions


def test_status_takes_host_and_port_as_an_application_server_is_named(served: str) -> None:
    address = served.removeprefix("http://")
    code, text = run_in_terminal(["status", address], 30, interrupt=False)
    assert code == 0, text
    assert f"{served}: ok (RUNNING)" in text


def _times(text: str) -> set[str]:
    return set(re.findall(r"\d\d:\d\d:\d\d", text))


def test_watch_redraws_until_ctrl_c(served: str) -> None:
    code, text = run_in_terminal(
        ["status", served, "--watch", "--interval", "0.2"], 60, True,
        enough=lambda text: len(_times(text)) >= 2,
    )  # fmt: skip
    assert code == 0, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert len(_times(text)) >= 2, "redrawn with a new time"


def test_an_instance_that_does_not_answer_is_named() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, text = run_in_terminal(["status", url], 30, interrupt=False)
    assert code == 1
    assert f"iqstate status: {url} did not answer" in text


def narrow_cluster(host: str) -> list[dict[str, Any]]:
    """Two live instances on `host` and a third that went away a while ago."""
    replicas = [
        {"store": "word-counts", "partition": p, "role": role, "lag": 12345}
        for p in range(2)
        for role in ("RUNNING", "STANDBY")
    ]
    return [
        {"host": host, "port": 7071 + n, "live": True, "departure": None,
         "replicas": replicas[n::2]}
        for n in range(2)
    ] + [
        {"host": host, "port": 7073, "live": False, "replicas": [],
         "departure": {"reason": "silent", "seconds_ago": 110.3}},
    ]  # fmt: skip


@pytest.mark.parametrize("host", ["127.0.0.1", "ip-10-0-0-11.eu-west-1.compute.internal"])
def test_every_address_and_count_is_whole_in_an_80_column_terminal(host: str) -> None:
    """Addresses are what tells the rows apart: a narrow terminal (or a pipe: 80 columns)
    wraps the state, and folds a cloud host name onto more lines (an IP address not at
    all), but cuts neither an address nor a count short."""
    health = {"status": "ok", "state": "RUNNING", "broker_silence_s": 0.5}
    console = Console(record=True, width=80, color_system=None, file=io.StringIO())
    console.print(render(f"http://{host}:7071", health, narrow_cluster(host)))
    text = console.export_text()
    assert all(len(line.rstrip()) <= 80 for line in text.splitlines())
    assert "…" not in text, text
    instances, partitions = text.split("\npartitions", 1)

    def cells(table: str) -> list[list[str]]:
        return [
            [cell.strip() for cell in line.split("│")[1:-1]]
            for line in table.splitlines()
            if line.startswith("│")
        ]

    rows = cells(instances)
    assert all(len(row) == 7 for row in rows), text  # every column there, none cropped
    addresses = [f"{host}:{port}" for port in (7071, 7072, 7073)]
    assert "".join(row[0] for row in rows) == "".join(addresses), text
    assert [row[6] for row in rows if row[6]] == ["24690", "24690", "-"], text
    if len(host) < 16:
        assert [row[0] for row in rows if row[0]] == addresses, "an IP address is one line"
    actives = "".join(row[2] for row in cells(partitions))
    assert actives == 2 * f"{host}:7071", text


@pytest.mark.parametrize("bundle", ["missing", "not PEM"])
def test_a_ca_bundle_that_does_not_load_is_named(tmp_path: Path, bundle: str) -> None:
    ca = tmp_path / "ca.pem"
    if bundle == "not PEM":
        ca.write_text("not a certificate\n")
    url = f"https://127.0.0.1:{free_port()}"
    code, text = run_in_terminal(["status", "--tls-ca", str(ca), url], 30, interrupt=False)
    assert code == 1 and "Traceback" not in text
    expected = "no such file" if bundle == "missing" else "does not load as PEM certificates"
    assert f"iqstate status: --tls-ca {ca}" in text and expected in text
