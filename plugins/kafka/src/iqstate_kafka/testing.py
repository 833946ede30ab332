"""A real Apache Kafka broker on this machine, for tests, demos and benchmarks: distributed
mode itself never imports this module.

`kafka_classpath()` fetches Apache Kafka's broker jars from Maven Central with `mvn` once
(a one-dependency `pom.xml` in `~/.cache/iqstate/kafka-<version>/`, and the SLF4J binding of
its log4j2 in `kafka-<version>-logging/`; Maven's local repository caches the jars, and a
finished copy is reused without running Maven again). `LocalBroker` formats a log directory
and runs one combined KRaft broker/controller on free loopback ports as a child process,
settings chosen for small machines (one offsets partition, no initial rebalance delay, no
auto-created topics, a small heap). It can be stopped and started again on the same ports and
data, like a broker that restarts under running clients. A directory serves one broker at a
time, and a port another program holds is refused before anything starts.

    with LocalBroker() as broker:
        cluster = KafkaCluster(broker.bootstrap_servers)
"""

from __future__ import annotations

import base64
import errno
import fcntl
import os
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


LOGGING_SETTINGS = """\
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
"""
"""log4j2's settings for the broker: its warnings and errors on its output (`broker.log`)."""


def kafka_classpath(version: str = KAFKA_VERSION, cache: Path | None = None) -> str:
    """The JVM classpath of Apache Kafka `version`'s broker, its jars fetched with `mvn` on
    first use: Maven's dependencies of `kafka_2.13`, plus the binding of SLF4J (Kafka's
    logging API) to log4j2 that Kafka's own distribution ships (without one, Kafka's log
    lines, its errors among them, go nowhere).

    Concurrent callers (several test processes) wait on a lock file; only one runs Maven.
    """
    try:
        kafka = maven_jars(
            "org.apache.kafka", "kafka_2.13", version, f"kafka-{version}", cache, "Apache Kafka"
        )
        log4j = next(kafka.glob("log4j-core-*.jar"), None)
        if log4j is None:  # Kafka 3.x logs with log4j 1: no log4j2 binding to add
            return f"{kafka}/*"
        log4j_version = log4j.name.removeprefix("log4j-core-").removesuffix(".jar")
        logging = maven_jars(
            "org.apache.logging.log4j",
            "log4j-slf4j-impl",
            log4j_version,
            f"kafka-{version}-logging",
            cache,
            "log4j2's SLF4J binding",
        )
    except MavenError as exc:
        raise LocalBrokerError(str(exc)) from exc
    # the binding alone: its other dependencies are Kafka's, of the same versions
    return f"{kafka}/*:{logging}/log4j-slf4j-impl-{log4j_version}.jar"


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _refuse_ports_in_use(ports: tuple[int, int]) -> None:
    """Raise `LocalBrokerError` naming a port that a listening socket (another broker, any
    program) holds: Kafka would fail to bind it, or a client would reach the other broker.
    SO_REUSEADDR, as Kafka binds, lets through the closed connections a restart leaves."""
    for port in ports:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                raise LocalBrokerError(
                    f"port {port} on 127.0.0.1 is in use by another program (another Kafka "
                    "broker?): stop it, or choose another port"
                ) from exc


def _lock_directory(directory: Path) -> int:
    """Lock `<directory>/broker.lock` (a file descriptor): one broker per directory. The
    broker's process inherits it, so the lock lasts as long as the broker does, even when
    its starter was killed, and ends with it (no stale lock after a SIGKILL or a reboot)."""
    fd = os.open(directory / "broker.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            pid = (directory / "broker.pid").read_text(encoding="ascii").strip()
        except FileNotFoundError:
            pid = "unknown"
        raise LocalBrokerError(
            f"the directory {directory} is in use by a running Kafka broker (pid {pid}): "
            "stop it first, or use another directory"
        ) from None
    return fd


def _stored_cluster_id(data: Path) -> str:
    """The cluster id the log directory `data` was formatted with."""
    for line in (data / "meta.properties").read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "cluster.id":
            return value.strip()
    raise LocalBrokerError(f"{data / 'meta.properties'} names no cluster.id")


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

    `directory` holds `server.properties`, `log4j2.properties`, the log directory `data/`, the
    broker's output `broker.log` and, while it runs, its pid in `broker.pid` and a lock on
    `broker.lock` (a second broker on the directory is refused); without one, a temporary
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
        self._lock: int | None = None
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

        Raises `LocalBrokerError`, having changed nothing, if the directory is in use by a
        running broker or a port by another program; with the tail of the broker's output if
        it exits or does not answer within `start_timeout` seconds.
        """
        if self.running:
            return self
        self.stop()  # a broker that died: give up its directory lock, or this start is refused
        if self._directory is None:
            self._directory = Path(tempfile.mkdtemp(prefix="iqstate-kafka-"))
        self._directory.mkdir(parents=True, exist_ok=True)
        lock = self._lock = _lock_directory(self._directory)
        try:
            if self._ports is None:
                port, controller_port = _free_ports(2)
                self._ports = (self._port or port, controller_port)
            _refuse_ports_in_use(self._ports)
            self._launch(kafka_classpath(self._version), self._directory, self._ports, lock)
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the broker: SIGTERM (a clean shutdown), then SIGKILL after `stop_timeout`;
        then give its directory up."""
        process = self._process
        if process is not None:
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
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

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
        """The last lines the broker printed (its log4j warnings and errors, any JVM message)."""
        try:
            text = (self.directory / "broker.log").read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return "(no output)"
        return last_lines(text.splitlines())

    def _launch(self, classpath: str, directory: Path, ports: tuple[int, int], lock: int) -> None:
        """Write the settings, format the log directory the first time, start the process
        (which inherits the directory's `lock`)."""
        settings = _write_settings(directory, ports)
        logging = directory / "log4j2.properties"
        logging.write_text(LOGGING_SETTINGS, encoding="utf-8")
        java = [_java(), f"-Dlog4j2.configurationFile={logging}", "-cp", classpath]
        if not (directory / "data" / "meta.properties").exists():
            self._format(java, settings)
        with (directory / "broker.log").open("ab") as log:
            self._process = subprocess.Popen(
                [
                    *java,
                    f"-Xmx{self._heap}",
                    "-XX:+UseSerialGC",  # one GC thread: test machines have few cores
                    "-Djava.awt.headless=true",
                    "kafka.Kafka",
                    str(settings),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the caller, which stops the broker
                pass_fds=(lock,),
            )
        self._finalizer = weakref.finalize(self, _kill, self._process)
        (directory / "broker.pid").write_text(f"{self._process.pid}\n", encoding="ascii")

    def _format(self, java: list[str], settings: Path) -> None:
        command = [
            *java,
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
        """Poll the broker with an admin client until it answers with this directory's
        cluster id, while its process runs: an open port is not a ready broker, and the
        broker answering could be another one."""
        settings: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        settings["logger"] = CLIENT_LOGGER
        admin = AdminClient(settings)
        cluster_id = _stored_cluster_id(self.directory / "data")
        deadline = time.monotonic() + self._start_timeout
        while True:
            if not self.running:
                process = self._process
                code = process.returncode if process is not None else None
                raise LocalBrokerError(
                    f"the Kafka broker exited with code {code} while starting "
                    f"(directory {self.directory}); its output ends with:\n{self.output_tail()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LocalBrokerError(
                    f"the Kafka broker at {self.bootstrap_servers} did not answer within "
                    f"{self._start_timeout:g} s (directory {self.directory}); its output ends "
                    f"with:\n{self.output_tail()}"
                )
            try:
                metadata = admin.list_topics(timeout=min(1.0, remaining))
            except KafkaException:
                continue
            if metadata.cluster_id not in (None, cluster_id):
                raise LocalBrokerError(
                    f"another Kafka cluster ({metadata.cluster_id}, not {cluster_id}) answers "
                    f"at {self.bootstrap_servers}: stop it, or choose another port"
                )
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
