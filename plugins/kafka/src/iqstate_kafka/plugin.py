"""iqstate-kafka as a plugin: it adds `iqstate broker`, a local Kafka to try cluster mode
with (the jars come from Maven Central, as the tests get them; Java 17 is needed)."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from iqstate import arguments
from iqstate.hookspecs import hookimpl


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir", default="iqstate-kafka", help="the broker's directory (settings, data, log)"
    )
    parser.add_argument(
        "--port", type=arguments.port_or_any, default=9092, help="client port; 0: any free port"
    )


def _run(args: argparse.Namespace) -> int:
    """Run a broker until Ctrl-C or SIGTERM. A broker that cannot start (its directory in
    use, a port taken) or that stops raises `LocalBrokerError`: `iqstate` prints it and exits
    with status 1."""
    from iqstate_kafka.testing import LocalBroker, LocalBrokerError

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker = LocalBroker(Path(args.dir).resolve(), port=args.port or None)
    try:
        print("starting Kafka (the first run fetches it from Maven Central)...", flush=True)
        broker.start()
        print(
            f"Kafka is running at {broker.bootstrap_servers} (KRaft, one broker; data in "
            f"{broker.directory}). Ctrl-C stops it.",
            flush=True,
        )
        while not stop.wait(0.5):
            if not broker.running:
                tail = broker.output_tail()
                raise LocalBrokerError(f"Kafka stopped; its output ends with:\n{tail}")
        print("stopping Kafka...", flush=True)
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


@hookimpl
def iqstate_register_commands(register: Any) -> None:
    register("broker", "run a local Kafka broker to try cluster mode with", _add_arguments, _run)
