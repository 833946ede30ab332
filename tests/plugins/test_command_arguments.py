"""Plugins' commands refuse values that cannot work before anything starts (no Spark, no
broker, no server), naming the option and what it must be."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["demo", "--http-port", "99999"], "argument --http-port: must be a port number"),
        (["demo", "--batches", "-1"], "argument --batches: must be a whole number of at least 1"),
        (["demo", "--lines", "0"], "argument --lines: must be a whole number of at least 1"),
        (["demo", "--interval", "0"], "argument --interval: must be a number of seconds"),
        (["demo", "--cluster", "--rate", "0"], "argument --rate: must be a whole number"),
        (["broker", "--port", "70000"], "argument --port: must be a port number from 1 to"),
        (["status", "http://127.0.0.1:1", "--interval", "-2"], "argument --interval: must be"),
    ],
)
def test_a_command_refuses_a_value_naming_the_option(arguments: list[str], complaint: str) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "iqstate.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 2 and complaint in finished.stderr, finished.stderr
    assert "Traceback" not in finished.stderr
