"""`iqstate broker` and `LocalBroker` refuse, before touching anything, a start that would
break a running broker or mistake another one for theirs: a directory in use, a port taken.
A start that fails exits non-zero; a stale pid file does not block a start."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from iqstate_kafka import LocalBroker, LocalBrokerError, testing


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of this module's own, which the refused starts must leave working."""
    with LocalBroker(tmp_path_factory.mktemp("running")) as broker:
        yield broker


def broker_command(directory: Path, port: int) -> subprocess.CompletedProcess[str]:
    """`iqstate broker --port <port> --dir <directory>`, expected to give up at once."""
    command = ["iqstate.cli", "broker", "--port", str(port), "--dir", str(directory)]
    return subprocess.run(
        [sys.executable, "-m", *command], capture_output=True, text=True, timeout=120, check=False
    )


def port_of(broker: LocalBroker) -> int:
    return int(broker.bootstrap_servers.rpartition(":")[2])


def test_a_second_start_on_a_live_directory_is_refused(running: LocalBroker) -> None:
    """Neither the command nor the class rewrites the running broker's settings or pid file,
    and the running broker still creates topics."""
    directory = running.directory
    files = ("server.properties", "broker.pid", "log4j2.properties")
    before = {name: (directory / name).read_bytes() for name in files}

    done = broker_command(directory, port_of(running))
    assert done.returncode == 1, done
    assert (
        f"the directory {directory.resolve()} is in use by a running Kafka broker "
        f"(pid {running.pid}): stop it first, or use another directory"
    ) in done.stderr
    assert "Kafka is running" not in done.stdout
    with pytest.raises(LocalBrokerError, match="is in use by a running Kafka broker"):
        LocalBroker(directory).start()

    assert {name: (directory / name).read_bytes() for name in files} == before
    assert running.running
    admin = AdminClient({"bootstrap.servers": running.bootstrap_servers})
    admin.create_topics([NewTopic("after-refused-starts", 1, 1)])["after-refused-starts"].result(30)
    assert "after-refused-starts" in admin.list_topics(timeout=10).topics


def test_the_port_of_another_broker_is_refused(running: LocalBroker, tmp_path: Path) -> None:
    """Not "Kafka is running" because the other broker answers there."""
    port = port_of(running)
    done = broker_command(tmp_path / "broker", port)
    assert done.returncode == 1, done
    assert f"error: port {port} on 127.0.0.1 is in use by another program" in done.stderr
    assert "Kafka is running" not in done.stdout
    assert not (tmp_path / "broker" / "server.properties").exists()


@pytest.mark.parametrize("listening", [False, True])
def test_a_port_in_use_is_refused(tmp_path: Path, listening: bool) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        if listening:
            taken.listen()
        port = taken.getsockname()[1]
        done = broker_command(tmp_path / "cli", port)
        with (
            pytest.raises(LocalBrokerError, match=f"^port {port} on 127.0.0.1 is in use"),
            LocalBroker(tmp_path / "class", port=port),
        ):
            pass
    assert done.returncode == 1, done
    assert f"iqstate broker: error: port {port} on 127.0.0.1 is in use" in done.stderr


def test_readiness_needs_the_brokers_own_cluster(
    running: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were the port check passed (a race), the broker answering would still not be taken for
    this one: its cluster id is not the one this directory was formatted with."""
    monkeypatch.setattr(testing, "_refuse_ports_in_use", lambda ports: None)
    broker = LocalBroker(tmp_path / "broker", port=port_of(running))
    with pytest.raises(LocalBrokerError, match="another Kafka cluster|Address already in use"):
        broker.start()
    assert not broker.running
    assert running.running


def test_a_stale_pid_file_does_not_block_a_start(tmp_path: Path) -> None:
    """A pid file left by a broker killed with its starter (or by a reboot) names a process
    that is gone; the directory's lock went with it."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    directory = tmp_path / "broker"
    directory.mkdir()
    (directory / "broker.pid").write_text(f"{dead.pid}\n", encoding="ascii")
    (directory / "broker.lock").touch()
    with LocalBroker(directory) as broker:
        assert broker.pid not in (None, dead.pid)
        assert (directory / "broker.pid").read_text(encoding="ascii") == f"{broker.pid}\n"
        # A broker that died under its starter (a crash, a SIGKILL from outside) starts
        # again: the starter gives up the directory's lock it still held.
        killed = broker.pid
        assert killed is not None
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while broker.running:
            assert time.monotonic() < deadline, "the killed broker still runs"
            time.sleep(0.1)
        broker.start()
        assert broker.pid not in (None, killed)
    assert not (directory / "broker.pid").exists()
