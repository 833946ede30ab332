"""iqstate-http as a plugin: it adds the `iqstate serve` and `iqstate status` commands.

Loaded by every application at start, so it imports no part of the HTTP stack: the
server is imported when `iqstate serve` runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from iqstate import Application, IqstateError, arguments
from iqstate.hookspecs import hookimpl
from iqstate_http.kafka_settings import kafka_settings
from iqstate_http.limits import DEFAULT_MAX_BODY, ConnectionLimits
from iqstate_http.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from iqstate_http.store_options import parse_store

if TYPE_CHECKING:
    import argparse
    import ssl

_log = logging.getLogger("iqstate_http")
_LIMITS = {field.name: field for field in dataclasses.fields(ConnectionLimits)}

CLUSTER_DEFAULTS: dict[str, Any] = {"state_dir": "state", "standbys": 1, "reader_processes": 0}
"""What `--state-dir`, `--standbys` and `--reader-processes` mean when not given. Their
parsed value is `None` then, so a module's Application given beside one is refused."""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        nargs="?",
        help="the Application to serve, as 'module:attribute' (or declare one with --cluster)",
    )
    parser.add_argument("--host", default=None, help="default: 127.0.0.1, or the host of "
                        "--application-server with --cluster")  # fmt: skip
    parser.add_argument("--port", type=arguments.port, default=None, help="default: the port "
                        "the Application's application_server names (7070 unless it names "
                        "another), or that of --application-server with --cluster")  # fmt: skip
    cluster = parser.add_argument_group(
        "distributed mode", "serve an instance of a cluster instead of a module's Application"
    )
    cluster.add_argument("--cluster", metavar="BOOTSTRAP", help="Kafka bootstrap servers")
    cluster.add_argument("--app-id", help="the application id (names the changelog topics)")
    cluster.add_argument("--application-server", metavar="HOST:PORT",
                         help="where other instances and clients reach this one")  # fmt: skip
    cluster.add_argument("--state-dir", help="local replicas live here (default: "
                         f"{CLUSTER_DEFAULTS['state_dir']})")  # fmt: skip
    cluster.add_argument("--standbys", type=arguments.at_least_zero, help="standby replicas "
                         f"per partition (default: {CLUSTER_DEFAULTS['standbys']})")  # fmt: skip
    cluster.add_argument("--reader-processes", type=arguments.at_least_zero, metavar="N",
                         help="read the changelogs in N worker processes: a restore reads "
                         "on another core while this one applies (0: in this one; default: "
                         f"{CLUSTER_DEFAULTS['reader_processes']})")  # fmt: skip
    cluster.add_argument("--max-held-records", type=arguments.at_least_zero, metavar="N",
                         help="changelog records held in memory waiting for their batch "
                         "markers, so that each batch is applied whole (0: no bound; "
                         "default: KafkaCluster's max_held_records)")  # fmt: skip
    cluster.add_argument("--kafka-config", metavar="FILE", help="a properties file of Kafka "
                         "client settings (security.protocol, sasl.*, ssl.*, ...)")  # fmt: skip
    cluster.add_argument("-X", dest="kafka_settings", action="append", default=[],
                         metavar="KEY=VALUE", help="a Kafka client setting, over the file's; "
                         "repeat for each")  # fmt: skip
    cluster.add_argument("--store", action="append", default=[], metavar="SPEC",
                         help="NAME:key_value:PARTITIONS[,option=value...], "
                         "NAME:window:PARTITIONS,window_size_ms=MS,retention_ms=MS[,...], "
                         "NAME:timestamped_key_value:PARTITIONS[,...], "
                         "NAME:versioned_key_value:PARTITIONS,history_retention_ms=MS[,...], "
                         "NAME:session:PARTITIONS,retention_ms=MS[,...] or "
                         "NAME:global_key_value[,...]; repeat for each store")  # fmt: skip
    parser.add_argument(
        "--token-env",
        default=None,
        help="environment variable holding the bearer token (it must be set and non-empty)",
    )
    parser.add_argument(
        "--max-body",
        type=arguments.at_least_one,
        default=DEFAULT_MAX_BODY,
        help=f"bytes of a request body; more is answered 413 (default: {DEFAULT_MAX_BODY})",
    )
    parser.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    parser.add_argument("--tls-ca", metavar="PEM", help="CA bundle to verify the other "
                        "instances with when forwarding (default: the system's)")  # fmt: skip
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text",
                        help="log lines on stderr as text, or one JSON object a line")  # fmt: skip
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="warning")
    for name in _LIMITS:
        timeout = name.endswith("timeout")
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=arguments.seconds if timeout else arguments.at_least_one,
            default=None,
            help=("seconds" if timeout else "count") + " (default: ConnectionLimits' default)",
        )


def _check_tls_files(args: argparse.Namespace) -> None:
    """Refuse, before the application starts, TLS files the server could not load: each
    must exist, and the certificate and key must load together (the server would otherwise
    fail later with an SSL library error naming neither)."""
    import ssl
    from pathlib import Path

    given = [("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key), ("--tls-ca", args.tls_ca)]
    for flag, path in given:
        if path is not None and not Path(path).is_file():
            raise SystemExit(f"iqstate serve: {flag} {path}: no such file")
    if args.tls_cert is None:
        return
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise SystemExit(
            f"iqstate serve: --tls-cert {args.tls_cert} and --tls-key {args.tls_key} do not "
            f"load as a PEM certificate and its private key ({exc})"
        ) from exc
    if args.tls_ca is not None:
        try:
            context.load_verify_locations(args.tls_ca)
        except (OSError, ssl.SSLError) as exc:
            raise SystemExit(
                f"iqstate serve: --tls-ca {args.tls_ca} does not load as PEM certificates ({exc})"
            ) from exc


def load_application(target: str) -> Application:
    """`"package.module:app"` -> the Application; the error names what could not be found,
    or what was found instead."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"iqstate serve: expected 'module:attribute', got {target!r}")
    here = os.getcwd()
    if here not in sys.path:  # as uvicorn does: a module in the current directory imports
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"iqstate serve: cannot import {module_name!r}: {exc}") from exc
    try:
        found = getattr(module, attribute)
    except AttributeError:
        raise SystemExit(f"iqstate serve: module {module_name!r} has no {attribute!r}") from None
    if not isinstance(found, Application):
        raise SystemExit(f"iqstate serve: {target} is a {type(found).__name__}, not an iqstate "
                         "Application")  # fmt: skip
    return found


def token_from_env(variable: str | None, command: str = "iqstate serve") -> str | None:
    """The token named by `--token-env`; a variable that is unset or empty stops the command
    (serving without the token asked for would let anyone in)."""
    if variable is None:
        return None
    token = os.environ.get(variable, "")
    if not token.strip():
        state = "is not set" if variable not in os.environ else "is empty"
        raise SystemExit(
            f"{command}: --token-env {variable}: the variable {state}; set it to the "
            "bearer token, or leave --token-env out to go without one"
        )
    return token


def _serve(args: argparse.Namespace) -> int:
    from iqstate_http.restore_progress import RestoreProgress
    from iqstate_http.server import serve

    configure_logging(args.log_format, args.log_level)
    token = token_from_env(args.token_env)
    if (args.tls_cert is None) != (args.tls_key is None) or (
        args.tls_ca is not None and args.tls_cert is None
    ):
        raise SystemExit("iqstate serve: --tls-cert and --tls-key go together (and --tls-ca "
                         "with them)")  # fmt: skip
    _check_tls_files(args)
    _check_scheme(args.application_server, args.tls_cert is not None)
    chosen = {name: getattr(args, name) for name in _LIMITS if getattr(args, name) is not None}
    try:
        limits = ConnectionLimits(**chosen)
    except ValueError as exc:
        raise SystemExit(f"iqstate serve: {exc}") from exc
    if args.cluster is not None:
        app = cluster_application(args)
        host, port = app.host_info.host, app.host_info.port
    else:
        if args.target is None:
            raise SystemExit("iqstate serve: name the Application ('module:attribute') or "
                             "declare one with --cluster, --app-id, --application-server "
                             "and --store")  # fmt: skip
        _refuse_cluster_options(args)
        app = load_application(args.target)
        host, port = "127.0.0.1", app.host_info.port
    listen_host, listen_port = args.host or host, args.port or port
    if app.state.name == "CREATED":
        _refuse_a_taken_port(listen_host, listen_port)
        try:
            app.start()
        except IqstateError as exc:
            raise SystemExit(f"iqstate serve: {exc}") from exc
    progress = RestoreProgress(app, terminal=sys.stderr.isatty())
    progress.start()
    try:
        serve(app, host=listen_host, port=listen_port, token=token,
              max_body=args.max_body, limits=limits, ssl_certfile=args.tls_cert,
              ssl_keyfile=args.tls_key, ssl_ca_certs=args.tls_ca,
              on_started=_announcer(app, args))  # fmt: skip
    except KeyboardInterrupt:  # Ctrl-C: uvicorn stopped the server; stop quietly too
        pass
    finally:
        progress.stop()
        app.close()
    return 0


def _refuse_a_taken_port(host: str, port: int) -> None:
    """Refuse, before the application starts, an address the server cannot listen on: an
    instance joining its cluster first would be assigned partitions and routed to, then
    leave when the server fails (another instance already serving there, say). Each
    address `host` resolves to is bound as the server binds it (asyncio: SO_REUSEADDR, and
    IPv6 only on an IPv6 socket); anything else is left for the server to report."""
    import errno
    import socket

    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                    continue
                raise SystemExit(
                    f"iqstate serve: cannot listen on {host}:{port} ({exc.strerror}); is "
                    "another instance or program serving there? Choose another --port (and "
                    "the application_server that names it: the Application's, or "
                    "--application-server with --cluster)"
                ) from None


def _check_scheme(application_server: str | None, tls: bool) -> None:
    """Refuse an `--application-server` whose scheme says otherwise than the TLS options:
    the other instances and the routing client would speak one protocol to a port serving
    the other, and every request sent there would fail."""
    scheme, written, _ = (application_server or "").partition("://")
    if not written:
        return
    if scheme == "https" and not tls:
        raise SystemExit(
            f"iqstate serve: --application-server {application_server} says HTTPS, but "
            "without --tls-cert and --tls-key this instance serves plain HTTP; give them, "
            "or write the address without https://"
        )
    if scheme == "http" and tls:
        raise SystemExit(
            f"iqstate serve: --application-server {application_server} says plain HTTP, "
            "but --tls-cert serves HTTPS; write https://host:port, or leave the scheme out"
        )


def _refuse_cluster_options(args: argparse.Namespace) -> None:
    """A module's Application declares itself: distributed mode's options beside it would
    be ignored, so they are refused, named."""
    given = [
        flag
        for flag, set_ in (
            ("--app-id", args.app_id is not None),
            ("--application-server", args.application_server is not None),
            ("--state-dir", args.state_dir is not None),
            ("--standbys", args.standbys is not None),
            ("--reader-processes", args.reader_processes is not None),
            ("--max-held-records", args.max_held_records is not None),
            ("--kafka-config", args.kafka_config is not None),
            ("-X", bool(args.kafka_settings)),
            ("--store", bool(args.store)),
        )
        if set_
    ]
    if given:
        raise SystemExit(
            f"iqstate serve: {', '.join(given)} declare a --cluster instance; the module's "
            "Application declares these itself (Application(...), KafkaCluster(...) and its "
            "stores in the module)"
        )


def _announcer(app: Application, args: argparse.Namespace) -> Callable[[str], None] | None:
    """What prints where the server listens, once it does, when no log line says it (the
    info-level one does; a JSON log gets nothing but log records)."""
    if args.log_format != "text" or _log.isEnabledFor(logging.INFO):
        return None

    def announce(url: str) -> None:
        print(f"iqstate serve: {app.application_id} answering on {url} (Ctrl-C stops it)",
              file=sys.stderr, flush=True)  # fmt: skip

    return announce


def cluster_application(args: argparse.Namespace) -> Application:
    """An Application joining a cluster, declared from `--cluster` and its companions."""
    missing = [flag for flag, value in (("--app-id", args.app_id),
               ("--application-server", args.application_server)) if not value]  # fmt: skip
    if missing or not args.store:
        raise SystemExit(
            f"iqstate serve --cluster needs {', '.join(missing + ['--store'] * (not args.store))}"
        )
    if args.target is not None:
        raise SystemExit("iqstate serve: give a module's Application or --cluster, not both")
    try:
        from iqstate_kafka import KafkaCluster
    except ImportError as exc:
        raise SystemExit(
            "iqstate serve --cluster needs the iqstate-kafka distribution "
            "(pip install ./plugins/kafka from the repository, beside ./core)"
        ) from exc
    try:
        stores = [parse_store(text) for text in args.store]
        settings = kafka_settings(args.kafka_config, args.kafka_settings)
        held = args.max_held_records
        held_records: dict[str, Any] = {} if held is None else {"max_held_records": held or None}
        chosen = {name: default if getattr(args, name) is None else getattr(args, name)
                  for name, default in CLUSTER_DEFAULTS.items()}  # fmt: skip
        app = Application(
            args.app_id,
            chosen["state_dir"],
            application_server=args.application_server,
            num_standby_replicas=chosen["standbys"],
            cluster=KafkaCluster(
                args.cluster,
                client_config=settings,
                reader_processes=chosen["reader_processes"],
                **held_records,
            ),
        )
        for store in stores:
            store.declare(app)
    except (ValueError, TypeError, IqstateError) as exc:
        raise SystemExit(f"iqstate serve: {exc}") from exc
    return app


def _add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url",
        help="any instance, e.g. http://127.0.0.1:7070, or host:port as --application-server "
        "names it (http; https with --tls-ca)",
    )
    parser.add_argument(
        "--token-env", default=None, help="environment variable holding the bearer token"
    )
    parser.add_argument("--tls-ca", metavar="PEM", help="CA bundle to verify an https URL with")
    parser.add_argument("--watch", action="store_true", help="redraw until Ctrl-C")
    parser.add_argument(
        "--interval", type=arguments.seconds, default=2.0, help="seconds between redraws"
    )


def _client_context(ca: str) -> ssl.SSLContext:
    """A client's TLS context trusting the CA bundle `ca`; exits naming the file when it is
    missing or holds no PEM certificates."""
    import ssl
    from pathlib import Path

    if not Path(ca).is_file():
        raise SystemExit(f"iqstate status: --tls-ca {ca}: no such file")
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise SystemExit(
            f"iqstate status: --tls-ca {ca} does not load as PEM certificates ({exc})"
        ) from exc


def _status(args: argparse.Namespace) -> int:
    from rich.console import Console

    from iqstate_http.status import show, watch

    token = token_from_env(args.token_env, "iqstate status")
    if args.interval <= 0:
        raise SystemExit(f"iqstate status: --interval must be > 0 seconds, got {args.interval}")
    console = Console()
    verify = True if args.tls_ca is None else _client_context(args.tls_ca)
    url = args.url
    if "://" not in url:  # host:port, as an application server is named
        url = f"{'http' if args.tls_ca is None else 'https'}://{url}"
    if args.watch:
        return watch(url, token, console, args.interval, verify)
    return show(url, token, console, verify)


@hookimpl
def iqstate_register_commands(register: Any) -> None:
    register("serve", "serve an Application's stores over HTTP", _add_arguments, _serve)
    register(
        "status",
        "show a cluster's instances, roles and lags, as one instance sees them",
        _add_status_arguments,
        _status,
    )
