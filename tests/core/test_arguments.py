"""The values `iqstate` commands take: each refused with what it must be."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest

from iqstate import arguments


@pytest.mark.parametrize(
    ("read", "text", "value"),
    [
        (arguments.port, "1", 1),
        (arguments.port, "65535", 65535),
        (arguments.port_or_any, "0", 0),
        (arguments.port_or_any, "8080", 8080),
        (arguments.at_least_one, "1", 1),
        (arguments.at_least_zero, "0", 0),
        (arguments.seconds, "0.25", 0.25),
        (arguments.seconds, "3", 3.0),
    ],
)
def test_good_values_are_read(read: Callable[[str], Any], text: str, value: object) -> None:
    assert read(text) == value


@pytest.mark.parametrize(
    ("read", "text", "complaint"),
    [
        (arguments.port, "0", "must be a port number from 1 to 65535, got '0'"),
        (arguments.port, "65536", "must be a port number from 1 to 65535, got '65536'"),
        (arguments.port, "-1", "must be a port number from 1 to 65535, got '-1'"),
        (arguments.port_or_any, "99999", "from 1 to 65535, or 0 for any, got '99999'"),
        (arguments.port_or_any, "80.0", "or 0 for any, got '80.0'"),
        (arguments.at_least_one, "0", "must be a whole number of at least 1, got '0'"),
        (arguments.at_least_one, "²", "must be a whole number of at least 1, got '²'"),
        (arguments.at_least_zero, "-1", "must be a whole number of at least 0, got '-1'"),
        (arguments.at_least_zero, "1e3", "must be a whole number of at least 0, got '1e3'"),
        (arguments.seconds, "0", "must be a number of seconds above 0, got '0'"),
        (arguments.seconds, "nan", "must be a number of seconds above 0, got 'nan'"),
        (arguments.seconds, "inf", "must be a number of seconds above 0, got 'inf'"),
        (arguments.seconds, "soon", "must be a number of seconds above 0, got 'soon'"),
    ],
)
def test_bad_values_are_refused_saying_what_they_must_be(
    read: Callable[[str], Any], text: str, complaint: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="^must be") as refused:
        read(text)
    assert complaint in str(refused.value)


def test_an_option_names_itself_in_the_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="iqstate serve")
    parser.add_argument("--port", type=arguments.port)
    with pytest.raises(SystemExit):
        parser.parse_args(["--port", "70000"])
    assert "argument --port: must be a port number from 1 to 65535" in capsys.readouterr().err


@pytest.mark.parametrize("port", [-1, 65536, 70_000, True, 80.0, "80", None])
def test_check_port_refuses_what_no_socket_can_listen_on(port: object) -> None:
    with pytest.raises(ValueError, match=f"port must be a number from 1 to 65535.*{port!r}"):
        arguments.check_port(port)


def test_check_port_takes_zero_only_where_any_port_will_do() -> None:
    assert arguments.check_port(0) == 0
    with pytest.raises(ValueError, match="from 1 to 65535, got 0"):
        arguments.check_port(0, any_port=False)
