"""A real Apache Kafka broker on this machine, for tests, demos and benchmarks: distributed
mode itself never imports this module.

`kafka_classpath()` fetches Apache Kafka's broker jars from Maven Central with `mvn` once
(a one-dependency `pom.xml` in `~/.cache/iqstate/kafka-<version>/`; Maven's local repository
caches the jars, and a finished copy is reused without running Maven again). `LocalBroker`
formats a log directory and runs one combined KRaft broker/controller on free loopback ports
as a child process, settings chosen for small machines (one offsets partition, no initial
rebalance delay, no auto-created topics, a small heap). It can be stopped and started again
on the same ports and data, like a broker that restarts under running clients.

    with LocalBroker() as broker:
        cluster = KafkaCluster(broker.bootstrap_servers)
"""

from __future__ import annotations

import base64
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from iqstate_kafka.errors import ClusterError
from iqstate_kafka.maven import MavenError, last_lines, maven_jars
from iqstate_kafka.settings import CLIENT_LOGGER


class LocalBrokerError(ClusterError):
    """A local Kafka broker could not be fetched, formatted, started or stopped."""


KAFKA_VERSION = "4.4.0"
"""The newest Apache Kafka 4.x release on Maven Central when this was written."""

BROKER_SETTINGS: Mapping[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "log.cleaner.backoff.ms": "1000",
}
"""The broker's settings besides listeners and directories (see distributed-mode.md); its
log cleaner looks for topics to compact every second (15 s by default), so a test that
sets a topic's `segment.ms` low sees compaction within seconds."""


def kafka_classpath(version: str = KAFKA_VERSION, cache: Path | None = None) -> Path:
    """The folder of Apache Kafka `version`'s broker jars, fetched with `mvn` on first use.

    Concurrent callers (several test processes) wait on a lock file; only one runs Maven.
    """
    try:
        return maven_jars(
            "org.apache.kafka", "kafka_2.13", version, f"kafka-{version}", cache, "Apache Kafka"
        )
    except MavenError as exc:
        raise LocalBrokerError(str(exc)) from exc


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _cluster_id() -> str:
    """22 URL-safe base64 characters, as `kafka-storage random-uuid` prints (no leading '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Last resort at interpreter exit: a broker still running is killed with its starter
    (a starter killed by SIGKILL leaves it running: its pid is in `<directory>/broker.pid`)."""
    if process.poll() is None:
        process.kill()
        process.wait()


class LocalBroker:
    """One Apache Kafka broker (KRaft, combined broker and controller) on loopback.

    `directory` holds `server.properties`, the log directory `data/`, the broker's output
    `broker.log` and, while it runs, its pid in `broker.pid`; without one, a temporary
    directory is used and removed when the context manager exits. Ports are chosen on the
    first `start()` (the client port is `port` if given) and kept for later starts.
    """

    def __init__(
        self,
        directory: Path | str | None = None,
        *,
        version: str = KAFKA_VERSION,
        heap: str = "512m",
        start_timeout: float = 120.0,
        stop_timeout: float = 30.0,
        port: int | None = None,
    ) -> None:
        self._given = Path(directory) if directory is not None else None
        self._directory: Path | None = self._given
        self._version = version
        self._heap = heap
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._port = port
        self._ports: tuple[int, int] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes]], LocalBroker] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """`127.0.0.1:<port>` of the broker's listener (known after the first `start()`)."""
        if self._ports is None:
            raise LocalBrokerError("the broker has not been started yet: it has no port")
        return f"127.0.0.1:{self._ports[0]}"

    @property
    def directory(self) -> Path:
        if self._directory is None:
            raise LocalBrokerError("the broker has not been started yet: it has no directory")
        return self._directory

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> LocalBroker:
        """Start the broker (formatting its log directory the first time); wait until it answers.

        Raises `LocalBrokerError` with the tail of the broker's output if it exits or does not
        answer within `start_timeout` seconds.
        """
        if self.running:
            return self
        classpath = kafka_classpath(self._version)
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="iqstate-kafka-"))
        self._directory.mkdir(parents=True, exist_ok=True)
        if self._ports is None:
            port, controller_port = _free_ports(2)
            self._ports = (self._port or port, controller_port)
        settings = _write_settings(self._directory, self._ports)
        if not (self._directory / "data" / "meta.properties").exists():
            self._format(classpath, settings)
        log = (self._directory / "broker.log").open("ab")
        try:
            self._process = subprocess.Popen(
                [
                    _java(),
                    f"-Xmx{self._heap}",
                    "-XX:+UseSerialGC",  # one GC thread: test machines have few cores
                    "-Djava.awt.headless=true",
                    "-cp",
                    f"{classpath}/*",
                    "kafka.Kafka",
                    str(settings),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the caller, which stops the broker
            )
        finally:
            log.close()
        self._finalizer = weakref.finalize(self, _kill, self._process)
        (self._directory / "broker.pid").write_text(f"{self._process.pid}\n", encoding="ascii")
        self._wait_until_ready()
        return self

    def stop(self) -> None:
        """Stop the broker: SIGTERM (a clean shutdown), then SIGKILL after `stop_timeout`."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(self._stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._process = None
        (self.directory / "broker.pid").unlink(missing_ok=True)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    def restart(self) -> LocalBroker:
        """Stop, then start again on the same ports and log directory."""
        self.stop()
        return self.start()

    def __enter__(self) -> LocalBroker:
        try:
            return self.start()
        except BaseException:
            self._cleanup()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        self.stop()
        if self._given is None and self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def output_tail(self) -> str:
        """The last lines the broker printed (its log4j errors and any JVM message)."""
        try:
            text = (self.directory / "broker.log").read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no output)"
        return last_lines(text.splitlines())

    def _format(self, classpath: Path, settings: Path) -> None:
        command = [
            _java(),
            "-cp",
            f"{classpath}/*",
            "kafka.tools.StorageTool",
            "format",
            "-t",
            _cluster_id(),
            "-c",
            str(settings),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            output = last_lines((done.stdout + done.stderr).splitlines())
            raise LocalBrokerError(
                f"formatting the Kafka log directory {self.directory / 'data'} failed "
                f"(exit {done.returncode}):\n{output}"
            )

    def _wait_until_ready(self) -> None:
        """Poll the broker with an admin client: an open port is not a ready broker."""
        settings: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        settings["logger"] = CLIENT_LOGGER
        admin = AdminClient(settings)
        deadline = time.monotonic() + self._start_timeout
        while True:
            if not self.running:
                process = self._process
                code = process.returncode if process is not None else None
                self.stop()
                raise LocalBrokerError(
                    f"the Kafka broker exited with code {code} while starting "
                    f"(directory {self.directory}); its output ends with:\n{self.output_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.stop()
                raise LocalBrokerError(
                    f"the Kafka broker at {self.bootstrap_servers} did not answer within "
                    f"{self._start_timeout:g} s (directory {self.directory}); its output ends "
                    f"with:\n{self.output_tail()}"
                )
            try:
                metadata = admin.list_topics(timeout=min(1.0, remaining))
            except KafkaException:
                continue
            if metadata.brokers:
                return


def _write_settings(directory: Path, ports: tuple[int, int]) -> Path:
    port, controller_port = ports
    settings = {
        **BROKER_SETTINGS,
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(directory / "data"),
    }
    path = directory / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
    return path


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise LocalBrokerError("java is not on PATH: Apache Kafka needs Java 17 or newer")
    return java
