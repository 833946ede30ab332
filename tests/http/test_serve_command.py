"""`iqstate serve` in distributed mode: stores declared on the command line, bad input named."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from iqstate_http.kafka_settings import KafkaSettingError, kafka_settings
from iqstate_http.store_options import StoreOptionError, parse_store
from support.network import free_port, wait_until_ok

from iqstate import Application
from iqstate.runtime.spec import KeyValueStoreSpec, WindowStoreSpec


def test_store_options_declare_key_value_and_window_stores(tmp_path: object) -> None:
    app = Application("cli", str(tmp_path))
    parse_store("counts:key_value:8,engine=rocksdb,value_serde=int64,caching=true").declare(app)
    parse_store(
        "per-minute:window:4,window_size_ms=60000,retention_ms=3600000,value_serde=int64"
    ).declare(app)
    counts, windows = app.stores["counts"], app.stores["per-minute"]
    assert isinstance(counts, KeyValueStoreSpec) and counts.partitions == 8
    assert counts.engine.name == "rocksdb" and counts.caching is True
    assert isinstance(windows, WindowStoreSpec) and windows.window_size_ms == 60_000
    assert windows.retention_ms == 3_600_000 and windows.value_serde.name == "int64"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("counts", "expected NAME:key_value:PARTITIONS"),
        ("counts:table:8", "must be key_value or window"),
        ("counts:key_value:zero", "partitions must be a number"),
        ("counts:key_value:8,window_size_ms=5", "not an option of a key_value store"),
        ("counts:key_value:8,caching=maybe", "caching must be true, false or a size"),
        ("w:window:2,window_size_ms=10", "needs window_size_ms and retention_ms"),
        ("w:window:2,window_size_ms=ten,retention_ms=100", "window_size_ms must be a number"),
    ],
)
def test_bad_store_options_are_named(text: str, complaint: str) -> None:
    with pytest.raises(StoreOptionError, match=complaint):
        parse_store(text)


def run_serve(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iqstate.cli", "serve", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_without_an_application_says_what_to_give() -> None:
    finished = run_serve()
    assert finished.returncode != 0 and "declare one with --cluster" in finished.stderr
    assert "Traceback" not in finished.stderr


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["--port", "99999"], "argument --port: must be a port number from 1 to 65535"),
        (["--port", "0"], "argument --port: must be a port number from 1 to 65535"),
        (["--port", "-1"], "argument --port: must be a port number from 1 to 65535"),
        (["--max-body", "0"], "argument --max-body: must be a whole number of at least 1"),
        (["--max-body", "-5"], "argument --max-body: must be a whole number of at least 1"),
        (["--standbys", "-1"], "argument --standbys: must be a whole number of at least 0"),
        (["--reader-processes", "two"], "argument --reader-processes: must be a whole number"),
        (["--max-held-records", "-3"], "argument --max-held-records: must be a whole number"),
        (["--header-timeout", "nan"], "argument --header-timeout: must be a number of seconds"),
        (["--max-connections", "0"], "argument --max-connections: must be a whole number of"),
    ],
)
def test_serve_refuses_ports_counts_and_limits_that_cannot_work(
    arguments: list[str], complaint: str
) -> None:
    finished = run_serve("some.module:app", *arguments)
    assert finished.returncode == 2 and complaint in finished.stderr, finished.stderr


def test_serve_refuses_a_header_limit_every_request_would_pass() -> None:
    finished = run_serve("some.module:app", "--max-header-bytes", "10")
    assert finished.returncode != 0 and "Traceback" not in finished.stderr
    assert "max_header_bytes must be at least 1024, got 10" in finished.stderr, finished.stderr


def test_serve_refuses_tls_files_it_cannot_load_naming_them(tmp_path: Path) -> None:
    authority = trustme.CA()
    served = authority.issue_cert("127.0.0.1")
    cert, key, other_key = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "other.pem"
    served.cert_chain_pems[0].write_to_path(str(cert))
    served.private_key_pem.write_to_path(str(key))
    authority.issue_cert("127.0.0.1").private_key_pem.write_to_path(str(other_key))
    missing = run_serve("some.module:app", "--tls-cert", str(tmp_path / "nofile.pem"),
                        "--tls-key", str(key))  # fmt: skip
    assert missing.returncode != 0
    assert f"--tls-cert {tmp_path / 'nofile.pem'}: no such file" in missing.stderr
    mismatched = run_serve("some.module:app", "--tls-cert", str(cert), "--tls-key", str(other_key))
    assert mismatched.returncode != 0
    assert "do not load as a PEM certificate and its private key" in mismatched.stderr
    for finished in (missing, mismatched):
        assert "Traceback" not in finished.stderr, finished.stderr


def test_serve_refuses_a_scheme_its_tls_options_contradict(tmp_path: Path) -> None:
    """Peers and clients would speak one protocol to a port serving the other: every
    request routed to the instance would fail while it held partitions."""
    common = ["--cluster", "127.0.0.1:9", "--app-id", "a", "--store", "s:key_value:2",
              "--state-dir", str(tmp_path / "state")]  # fmt: skip
    plain = run_serve(*common, "--application-server", "https://127.0.0.1:7173")
    assert plain.returncode == 1 and "says HTTPS, but without --tls-cert" in plain.stderr
    authority = trustme.CA()
    served = authority.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    served.cert_chain_pems[0].write_to_path(str(cert))
    served.private_key_pem.write_to_path(str(key))
    tls = run_serve(*common, "--application-server", "http://127.0.0.1:7173",
                    "--tls-cert", str(cert), "--tls-key", str(key))  # fmt: skip
    assert tls.returncode == 1 and "says plain HTTP, but --tls-cert serves HTTPS" in tls.stderr
    assert not (tmp_path / "state").exists(), "refused before anything started"


def test_serve_with_a_cluster_names_missing_flags_and_bad_stores() -> None:
    missing = run_serve("--cluster", "127.0.0.1:9")
    assert "--app-id" in missing.stderr and "--application-server" in missing.stderr
    bad = run_serve(
        "--cluster", "127.0.0.1:9", "--app-id", "a", "--application-server", "127.0.0.1:7071",
        "--store", "counts:table:2",
    )  # fmt: skip
    assert bad.returncode != 0 and "must be key_value or window" in bad.stderr
    assert "Traceback" not in missing.stderr + bad.stderr
    # Beside a module's Application these would be ignored: they are refused, named.
    ignored = run_serve("some_module:app", "--state-dir", "/srv/x", "--store", "s:key_value:2")
    assert ignored.returncode != 0
    assert "--state-dir, --store declare a --cluster instance" in ignored.stderr
    # Given at its default value, a flag is still given: refused too.
    defaults = run_serve("some_module:app", "--standbys", "1", "--reader-processes", "0")
    assert defaults.returncode != 0
    assert "--standbys, --reader-processes declare a --cluster instance" in defaults.stderr


def test_kafka_client_settings_from_a_file_and_flags(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "# the cluster's security\nsecurity.protocol=SASL_SSL\n! another comment\n\n"
        "sasl.mechanism: PLAIN\nssl.ca.location = /etc/ca.pem\n"
    )
    settings = kafka_settings(str(config), ["sasl.mechanism=SCRAM-SHA-512", "client.id=a=b"])
    assert settings == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "ssl.ca.location": "/etc/ca.pem",
        "client.id": "a=b",
    }
    config.write_text("security.protocol=SSL\nnot a setting\n")
    with pytest.raises(KafkaSettingError, match="line 2: expected key=value"):
        kafka_settings(str(config), [])
    with pytest.raises(KafkaSettingError, match="-X: expected key=value"):
        kafka_settings(None, ["novalue"])
    with pytest.raises(KafkaSettingError, match="missing.properties"):
        kafka_settings(str(tmp_path / "missing.properties"), [])


def test_serve_refuses_bad_kafka_settings_by_name(tmp_path: Path) -> None:
    common = ["--cluster", "127.0.0.1:9", "--app-id", "a",
              "--application-server", "127.0.0.1:7999", "--state-dir", str(tmp_path),
              "--store", "s:key_value:2"]  # fmt: skip
    owned = run_serve(*common, "-X", "enable.idempotence=false")
    assert owned.returncode != 0 and "enable.idempotence" in owned.stderr
    malformed = run_serve(*common, "-X", "oops")
    assert malformed.returncode != 0 and "-X: expected key=value" in malformed.stderr
    unheld = run_serve(*common, "--max-held-records", "-1")
    assert unheld.returncode == 2
    assert "argument --max-held-records: must be a whole number of at least 0" in unheld.stderr
    unknown = run_serve(*common, "-X", "no.such.setting=1")  # librdkafka's own refusal
    assert unknown.returncode != 0
    assert 'client_config: No such configuration property: "no.such.setting"' in unknown.stderr
    (tmp_path / "a-file").write_text("")
    blocked = run_serve(*common, "--state-dir", str(tmp_path / "a-file" / "state"))
    assert blocked.returncode != 0
    assert "state directory" in blocked.stderr and "Not a directory" in blocked.stderr
    for finished in (owned, malformed, unheld, unknown, blocked):
        assert "Traceback" not in finished.stderr


def serve_until_sigint(
    tmp_path: Path, module: str, source: str, *options: str, stop: int = signal.SIGINT
) -> tuple[int, str, int]:
    """Run `iqstate serve <module>:app` (the module's `source` in `tmp_path`) until it
    answers, then send it `stop`: its exit code, its stderr and its port."""
    (tmp_path / f"{module}.py").write_text(source)
    port = free_port()
    code, stderr = until_sigint(
        [sys.executable, "-m", "iqstate.cli", "serve", f"{module}:app", "--port", str(port),
         *options],
        tmp_path, {**os.environ, "PYTHONPATH": str(tmp_path)}, port, stop,
    )  # fmt: skip
    return code, stderr, port


def until_sigint(
    command: list[str],
    folder: Path,
    environment: dict[str, str],
    port: int,
    stop: int = signal.SIGINT,
) -> tuple[int, str]:
    """Run `command` in `folder` until the server it starts answers on `port`, then send
    it `stop`: its exit code and its stderr."""
    process = subprocess.Popen(
        command, cwd=folder, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        wait_until_ok(f"http://127.0.0.1:{port}/v1/health", process, 30, "iqstate serve")
        process.send_signal(stop)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stderr


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_stops_quietly_and_closes_the_application(tmp_path: Path, stop: int) -> None:
    """Ctrl-C, and SIGTERM as systemd, Docker and Kubernetes stop a service: the server
    stops, then the application closes (in a cluster: its partitions move at once)."""
    code, stderr, port = serve_until_sigint(
        tmp_path,
        "quiet_app",
        "import atexit\n"
        "from iqstate import Application\n"
        f"app = Application('quiet', {str(tmp_path / 'state')!r})\n"
        "app.key_value_store('s', 1)\n"
        "atexit.register(lambda: print('application', app.state.name, flush=True,\n"
        "                              file=__import__('sys').stderr))\n",
        stop=stop,
    )
    assert code == 0, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "application NOT_RUNNING" in stderr, stderr
    # At the default log level, one line says where it answers (no log line does).
    assert f"iqstate serve: quiet answering on http://127.0.0.1:{port} (Ctrl-C stops it)" in (
        stderr.splitlines()
    )


def test_a_sigterm_handler_of_the_applications_own_still_runs(tmp_path: Path) -> None:
    code, stderr, _ = serve_until_sigint(
        tmp_path,
        "handled_app",
        "import signal, sys\n"
        "from iqstate import Application\n"
        f"app = Application('handled', {str(tmp_path / 'state')!r})\n"
        "app.key_value_store('s', 1)\n"
        "def handler(signum, frame):\n"
        "    print('its own handler ran', file=sys.stderr, flush=True)\n"
        "    raise SystemExit(3)\n"
        "signal.signal(signal.SIGTERM, handler)\n",
        stop=signal.SIGTERM,
    )
    assert code == 3 and "its own handler ran" in stderr, stderr


def test_log_format_json_writes_one_object_a_line(tmp_path: Path) -> None:
    """For log shippers: with `--log-format json` every line on stderr is one JSON object,
    the server's own lines, the application's and a traceback's alike."""
    code, stderr, port = serve_until_sigint(
        tmp_path,
        "logged_app",
        "import logging\n"
        "from iqstate import Application\n"
        f"app = Application('logged', {str(tmp_path / 'state')!r})\n"
        "app.key_value_store('s', 1)\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    logging.getLogger('logged_app').exception('a \"quoted\"\\nmessage')\n",
        "--log-format", "json", "--log-level", "info",
    )  # fmt: skip
    assert code == 0, stderr
    lines = [json.loads(line) for line in stderr.splitlines()]
    by_message = {entry["message"]: entry for entry in lines}
    assert by_message[f"serving logged on http://127.0.0.1:{port}"]["logger"] == "iqstate_http"
    assert by_message["stopped serving logged"]["level"] == "INFO"
    failure = by_message['a "quoted"\nmessage']
    assert failure["level"] == "ERROR" and failure["logger"] == "logged_app"
    assert "ZeroDivisionError" in failure["exception"]
    assert all({"time", "level", "logger", "message"} <= entry.keys() for entry in lines)


def serve_script_until_sigint(tmp_path: Path, port: int, *options: str) -> tuple[int, str]:
    """Run `iqstate serve <options>` with the console script from `tmp_path`, as a user
    does, without PYTHONPATH, until it answers on `port`, then SIGINT it."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    script = Path(sys.executable).with_name("iqstate")
    command = ["env", "--default-signal=INT", str(script), "serve", *options]
    return until_sigint(command, tmp_path, environment, port)


def test_a_module_in_the_current_directory_is_served_on_its_application_server_port(
    tmp_path: Path,
) -> None:
    """`iqstate serve module:app` from the module's folder imports it (as uvicorn does), and
    listens on the port its `application_server` names, the address answers report."""
    port = free_port()
    (tmp_path / "here_app.py").write_text(
        "from iqstate import Application\n"
        f"app = Application('here', {str(tmp_path / 'state')!r}, "
        f"application_server='127.0.0.1:{port}')\n"
        "app.key_value_store('s', 1)\n"
    )
    code, stderr = serve_script_until_sigint(tmp_path, port, "here_app:app")
    assert code == 0, stderr
    assert "application_server" not in stderr, stderr


def test_serving_on_another_port_than_application_server_is_warned_of(tmp_path: Path) -> None:
    """Answers and metadata name `application_server`; a `--port` elsewhere would have other
    instances and the routing client knock on the wrong door, so the log says so."""
    (tmp_path / "elsewhere_app.py").write_text(
        "from iqstate import Application\n"
        f"app = Application('elsewhere', {str(tmp_path / 'state')!r})\n"
        "app.key_value_store('s', 1)\n"
    )
    port = free_port()
    code, stderr = serve_script_until_sigint(
        tmp_path, port, "elsewhere_app:app", "--port", str(port)
    )
    assert code == 0, stderr
    assert f"serving on port {port}, but the application's application_server is " in stderr
    assert "localhost:7070" in stderr


def test_a_target_that_is_not_an_application_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "not_app.py").write_text("app = 42\n")
    finished = subprocess.run(
        [sys.executable, "-m", "iqstate.cli", "serve", "not_app:app"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert finished.returncode != 0
    assert "not_app:app is a int, not an iqstate Application" in finished.stderr
    assert "Traceback" not in finished.stderr


def test_a_port_another_program_listens_on_is_refused_before_the_application_starts(
    tmp_path: Path,
) -> None:
    # In a cluster it would join, be routed to, then leave when the server failed.
    state = tmp_path / "state"
    (tmp_path / "taken_app.py").write_text(
        "from iqstate import Application\n"
        f"app = Application('taken', {str(state)!r})\n"
        "app.key_value_store('s', 1, engine='rocksdb')\n"
    )
    with socket.create_server(("127.0.0.1", 0)) as other:
        port = other.getsockname()[1]
        finished = subprocess.run(
            [sys.executable, "-m", "iqstate.cli", "serve", "taken_app:app", "--port", str(port)],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert finished.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in finished.stderr, finished.stderr
    assert "Traceback" not in finished.stderr
    assert not (state / "taken").exists(), "the application did not start"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_address_is_checked_as_the_server_binds_it(tmp_path: Path) -> None:
    # Free: it serves (the check binds an IPv6 socket); taken: refused, before starting.
    state = tmp_path / "state"
    (tmp_path / "v6_app.py").write_text(
        "from iqstate import Application\n"
        f"app = Application('v6', {str(state)!r})\n"
        "app.key_value_store('s', 1)\n"
    )
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as placeholder:
        port = placeholder.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "iqstate.cli", "serve", "v6_app:app", "--host", "::1",
         "--port", str(port)],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until_ok(f"http://[::1]:{port}/v1/health", server, 30, "iqstate serve on ::1")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
    with socket.create_server(("::1", 0), family=socket.AF_INET6) as other:
        taken = other.getsockname()[1]
        finished = subprocess.run(
            [sys.executable, "-m", "iqstate.cli", "serve", "v6_app:app", "--host", "::1",
             "--port", str(taken)],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert finished.returncode != 0
    assert f"cannot listen on ::1:{taken}" in finished.stderr, finished.stderr


def test_a_client_that_does_not_speak_http_is_logged_once_not_per_connection(
    tmp_path: Path,
) -> None:
    # A Kafka client given an instance's address reconnects every few milliseconds.
    (tmp_path / "plain_app.py").write_text(
        "from iqstate import Application\n"
        f"app = Application('plain', {str(tmp_path / 'state')!r})\n"
        "app.key_value_store('s', 1)\n"
    )
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "iqstate.cli", "serve", "plain_app:app", "--port", str(port)],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until_ok(f"http://127.0.0.1:{port}/v1/health", server, 30, "iqstate serve")
        for _ in range(50):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as peer:
                peer.sendall(b"\x00\x00\x00\x14\x00\x12\x00\x03not http at all\r\n\r\n")
                peer.recv(1024)  # uvicorn answers 400 and closes
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=30)
    assert stderr.count("Invalid HTTP request received.") == 1, stderr
