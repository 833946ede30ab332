"""Values the `iqstate` command and its plugins' subcommands take, checked where they are
read: a bad one is refused naming what it must be, before anything starts.

`check_port` serves the Python API too (`serve(port=...)`); the others are argparse
`type=` functions, whose `ArgumentTypeError` argparse prints beside the option's name.
"""

from __future__ import annotations

import argparse
import math


def check_port(port: object, *, any_port: bool = True) -> int:
    """`port` if a socket can listen on it (0, any free port, when `any_port`); else a
    `ValueError`. A larger number would be taken modulo 65536 by the OS: another port."""
    lowest = 0 if any_port else 1
    if isinstance(port, bool) or not isinstance(port, int) or not lowest <= port <= 65535:
        raise ValueError(f"port must be a number {_ports(any_port)}, got {port!r}")
    return port


def port(text: str) -> int:
    """A port a server listens on, 1 to 65535."""
    return _port(text, any_port=False)


def port_or_any(text: str) -> int:
    """A port a server listens on, or 0 for any free one."""
    return _port(text, any_port=True)


def at_least_one(text: str) -> int:
    """A count of at least 1."""
    number = _whole(text)
    if number is None or number < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return number


def at_least_zero(text: str) -> int:
    """A count of at least 0."""
    number = _whole(text)
    if number is None:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 0, got {text!r}")
    return number


def seconds(text: str) -> float:
    """A finite duration in seconds, above 0."""
    try:
        duration = float(text)
    except ValueError:
        duration = math.nan
    if not 0 < duration < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return duration


def _port(text: str, any_port: bool) -> int:
    try:
        return check_port(_whole(text), any_port=any_port)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a port number {_ports(any_port)}, got {text!r}"
        ) from None


def _ports(any_port: bool) -> str:
    return "from 1 to 65535" + (", or 0 for any" if any_port else "")


def _whole(text: str) -> int | None:
    """`text` as a non-negative whole number written in ASCII digits; `None` otherwise."""
    return int(text) if text.isascii() and text.isdigit() else None
