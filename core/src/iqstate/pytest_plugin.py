"""The `pytest11` entry point of iqstate: registers markers, and nothing else.

It imports nothing heavy, so installing iqstate never changes a test session beyond
making these markers known under `--strict-markers`.
"""

from __future__ import annotations

from typing import Any


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "iqstate_conformance: a test from the iqstate store conformance suite"
    )
    config.addinivalue_line(
        "markers", "iqstate_slow: a long-running iqstate test (state machines, crash loops)"
    )
