"""Running the service: `serve` (blocking) and `start_background` (a thread, for tests and apps)."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType

import uvicorn

from iqstate import Application
from iqstate.arguments import check_port
from iqstate.repeated_lines import RepeatedLines
from iqstate_http.admission import RangeLimits
from iqstate_http.change_stream import StreamSettings
from iqstate_http.limits import DEFAULT_MAX_BODY, DEFAULT_MAX_ROWS, ConnectionLimits
from iqstate_http.protocol import LimitedHttpToolsProtocol
from iqstate_http.service import QueryService

log = logging.getLogger("iqstate_http")

INVALID_REQUEST = "Invalid HTTP request received."
"""uvicorn's warning for bytes that are not HTTP, once per connection: a client of another
protocol pointed at the port (a Kafka client given an instance's address, say) reconnects
every few milliseconds. Logged once per 30 s, with how many were held back."""
logging.getLogger("uvicorn.error").addFilter(
    RepeatedLines(lambda line: line if line == INVALID_REQUEST else None)
)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True)
class Tls:
    """The service's certificate and key (PEM files), and the CA bundle it verifies the
    other instances' certificates with when it forwards (None: the system's)."""

    certfile: str
    keyfile: str
    ca_certs: str | None = None

    @classmethod
    def of(cls, certfile: str | None, keyfile: str | None, ca_certs: str | None) -> Tls | None:
        """The TLS settings given, or None; `ValueError` for half of them."""
        if certfile is None and keyfile is None:
            if ca_certs is not None:
                raise ValueError("ssl_ca_certs needs ssl_certfile and ssl_keyfile")
            return None
        if certfile is None or keyfile is None:
            raise ValueError(
                "TLS needs both a certificate (ssl_certfile) and its key (ssl_keyfile)"
            )
        return cls(certfile, keyfile, ca_certs)

    def peer_context(self) -> ssl.SSLContext:
        """How forwarded requests verify the other instances."""
        return ssl.create_default_context(cafile=self.ca_certs)


_EVERY_INTERFACE = frozenset({"", "0.0.0.0", "::"})


def _warn_of_another_port(app: Application, port: int) -> None:
    """Log a given port other than the `application_server`'s: answers and metadata name
    an address that is not this server's (which a proxy may forward to it)."""
    if port not in (0, app.host_info.port):
        log.warning(
            "serving on port %d, but the application's application_server is %s: answers "
            "and metadata name that address, and other instances and the routing client "
            "go there; set application_server to where clients reach this instance",
            port,
            app.host_info,
        )


def _url(tls: Tls | None, host: str, port: int) -> str:
    """The URL of a server listening on `host:port` (an IPv6 literal in brackets)."""
    return f"{'http' if tls is None else 'https'}://{f'[{host}]' if ':' in host else host}:{port}"


def _free_port(host: str) -> socket.socket:
    """A socket listening on a free port of `host`, for uvicorn to serve: bound here, so
    that its port is known before the service is made (uvicorn would bind one socket per
    address `host` resolves to, each on a free port of its own). `::` takes IPv4 too."""
    if ":" not in host:
        return socket.create_server((host, 0))
    dual = host == "::" and socket.has_dualstack_ipv6()
    return socket.create_server((host, 0), family=socket.AF_INET6, dualstack_ipv6=dual)


def _advertise_served(app: Application, host: str, listener: socket.socket) -> None:
    """Name the address a single instance is served at on a port nobody knew before
    (`Application.advertise`): `host` itself (an IPv6 literal in brackets), or for every
    interface the `application_server`'s host name. Instances of a cluster keep theirs."""
    if not app.single_instance:
        return
    if host in _EVERY_INTERFACE:
        host = app.host_info.host
    elif ":" in host:
        host = f"[{host}]"
    app.advertise(f"{host}:{listener.getsockname()[1]}")


def _config(
    app: Application,
    host: str,
    port: int,
    token: str | None,
    limits: ConnectionLimits | None,
    service: QueryService,
    tls: Tls | None,
) -> uvicorn.Config:
    asgi = service.asgi()
    if token is None and not _is_loopback(host):
        log.warning("serving %s on %s without a bearer token: anyone who can reach it can read "
                    "every store", app.application_id, host)  # fmt: skip
    limits = limits or ConnectionLimits()
    return uvicorn.Config(
        asgi,
        host=host,
        port=port,
        log_config=None,  # uvicorn's loggers go where the process sends every other
        log_level="warning",
        access_log=False,
        http=functools.partial(LimitedHttpToolsProtocol, limits=limits),  # type: ignore[arg-type]
        timeout_keep_alive=limits.keep_alive_timeout,  # type: ignore[arg-type]  # a float works
        ssl_certfile=None if tls is None else tls.certfile,
        ssl_keyfile=None if tls is None else tls.keyfile,
    )


class _Server(uvicorn.Server):
    """uvicorn's server, which first ends the open change streams when it shuts down: each
    sends its final event (`unavailable`, with the cursor) where uvicorn would otherwise
    wait for them to close, without end, and then cut them.

    With `drain` (a callable giving seconds, `Application.leave`), the first SIGTERM does
    not stop it at once: the application leaves its cluster, and the server keeps
    answering while the other instances take its partitions over (they forward to it
    until then), then stops. A second SIGTERM, or Ctrl-C, stops it at once."""

    def __init__(
        self,
        config: uvicorn.Config,
        service: QueryService,
        on_started: Callable[[int], None] | None = None,
        drain: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(config)
        self._service = service
        self._on_started = on_started
        self._drain = drain

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        drain, self._drain = self._drain, None
        if sig != signal.SIGTERM or drain is None or self.should_exit:
            super().handle_exit(sig, frame)
            return
        threading.Thread(
            target=self._drain_then_exit, args=(drain, sig, frame), name="iqstate-drain",
            daemon=True,
        ).start()  # fmt: skip

    def _drain_then_exit(
        self, drain: Callable[[], float], sig: int, frame: FrameType | None
    ) -> None:
        try:
            seconds = drain()
        except Exception:
            log.exception("SIGTERM: leaving the cluster failed; stopping now")
        else:
            if seconds > 0:
                log.info("SIGTERM: left the cluster; answering %.1f s more while the other "
                         "instances take over", seconds)  # fmt: skip
                time.sleep(seconds)
            else:
                log.info("SIGTERM: no other instance takes over; stopping now")
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)  # exits if the port cannot be bound
        if self.started and self._on_started is not None:
            self._on_started(self.servers[0].sockets[0].getsockname()[1])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._service.end_change_streams()
        await super().shutdown(sockets=sockets)


def serve(
    app: Application,
    host: str = "127.0.0.1",
    port: int = 7070,
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    limits: ConnectionLimits | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    range_limits: RangeLimits | None = None,
    forward_timeout: float = 10.0,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    ssl_ca_certs: str | None = None,
    change_streams: StreamSettings | None = None,
    on_started: Callable[[str], None] | None = None,
) -> None:
    """Serve `app` until interrupted (listens on localhost unless told otherwise): Ctrl-C
    raises `KeyboardInterrupt`, SIGTERM returns (unless the process handles it itself)
    after a drain: an application in a cluster leaves it first (`Application.leave`) and
    is served while the other instances take its partitions over; a second SIGTERM ends
    the drain. `on_started` is called with the server's URL once it listens.

    `max_rows` caps an unmerged range answer (422 beyond it), `range_limits` how many
    range requests run and wait at once, `forward_timeout` how long a request forwarded to
    another instance may take (seconds). `ssl_certfile` and `ssl_keyfile` serve HTTPS; then
    the other instances of the cluster serve HTTPS too, verified with `ssl_ca_certs` (a CA
    bundle; default: the system's). `change_streams`: the change streams' keep-alive pings
    and how long they wait for a partition's new host."""
    tls = Tls.of(ssl_certfile, ssl_keyfile, ssl_ca_certs)
    check_port(port)
    _warn_of_another_port(app, port)
    service = QueryService(
        app, token, max_body, max_rows, range_limits, forward_timeout,
        None if tls is None else tls.peer_context(), change_streams,
    )  # fmt: skip
    listener = None if port != 0 else _free_port(host)

    def started(bound: int) -> None:  # the port bound: `port` may be 0
        url = _url(tls, host, bound)
        log.info("serving %s on %s", app.application_id, url)
        if on_started is not None:
            on_started(url)

    try:
        with _sigterm_returns():
            config = _config(app, host, port, token, limits, service, tls)
            if listener is not None:
                _advertise_served(app, host, listener)
            sockets = None if listener is None else [listener]
            _Server(config, service, started, drain=app.leave).run(sockets=sockets)
    finally:  # also when uvicorn hands the Ctrl-C it caught back as KeyboardInterrupt
        if listener is not None:
            listener.close()  # uvicorn closes it once it served; not if it never did
        log.info("stopped serving %s", app.application_id)


class _Terminated(Exception):
    """SIGTERM arrived: the server stops, and `serve` returns."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


@contextlib.contextmanager
def _sigterm_returns() -> Iterator[None]:
    """Make SIGTERM (systemd's, Docker's and Kubernetes' stop) end `serve` by returning, so
    that the caller closes the application: its stores close cleanly (its partitions have
    moved to their standbys during the drain). uvicorn catches the signal to shut down,
    then raises it again for the handler it found: the default one ended the process there,
    before anything after `serve` ran. A handler of the caller's own is left to do its job."""
    if (
        threading.current_thread() is not threading.main_thread()  # signals reach it only
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    try:
        signal.signal(signal.SIGTERM, _terminated)
        yield
    except _Terminated:
        log.info("SIGTERM: stopped serving")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@dataclass
class BackgroundServer:
    """A running service: its `url`, its `port`, and `stop()`."""

    url: str
    port: int
    _server: uvicorn.Server
    _thread: threading.Thread

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


def start_background(
    app: Application,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
    limits: ConnectionLimits | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    range_limits: RangeLimits | None = None,
    forward_timeout: float = 10.0,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    ssl_ca_certs: str | None = None,
    change_streams: StreamSettings | None = None,
) -> BackgroundServer:
    """Start the service in a daemon thread (options as `serve`); `port=0` picks a free
    port, and a single instance (`Application.single_instance`) is then advertised there:
    its answers and metadata name the address served."""
    tls = Tls.of(ssl_certfile, ssl_keyfile, ssl_ca_certs)
    check_port(port)
    _warn_of_another_port(app, port)
    service = QueryService(
        app, token, max_body, max_rows, range_limits, forward_timeout,
        None if tls is None else tls.peer_context(), change_streams,
    )  # fmt: skip
    server = _Server(_config(app, host, port, token, limits, service, tls), service)
    listener = None if port != 0 else _free_port(host)
    try:
        if listener is not None:
            _advertise_served(app, host, listener)
        thread = threading.Thread(
            target=server.run,
            kwargs={"sockets": None if listener is None else [listener]},
            name="iqstate-http",
            daemon=True,
        )
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP service did not start on {host}:{port}")
            time.sleep(0.01)
    except BaseException:
        if listener is not None:
            listener.close()
        raise
    bound = server.servers[0].sockets[0].getsockname()[1]
    return BackgroundServer(_url(tls, host, bound), bound, server, thread)
