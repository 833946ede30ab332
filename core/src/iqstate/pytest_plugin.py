"""The `pytest11` entry point of iqstate: registers markers and the `long` hypothesis profile.

It imports nothing heavy, so installing iqstate never changes a test session beyond
making these markers known under `--strict-markers`, and, when a session asks for
`--hypothesis-profile=long`, defining that profile (unless the project defines its own).
"""

from __future__ import annotations

from typing import Any

import pytest

LONG_PROFILE = "long"
"""The profile docs/extending.md recommends for long conformance runs."""

LONG_MAX_EXAMPLES = 2_000


@pytest.hookimpl(tryfirst=True)  # before hypothesis's own plugin loads the profile
def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "iqstate_conformance: a test from the iqstate store conformance suite"
    )
    config.addinivalue_line(
        "markers", "iqstate_slow: a long-running iqstate test (state machines, crash loops)"
    )
    if config.getoption("hypothesis_profile", None) == LONG_PROFILE:
        register_long_profile()


def register_long_profile() -> None:
    """Define the `long` hypothesis profile (many examples, no deadline), unless one with
    that name is already registered (a project's conftest keeps its own)."""
    from hypothesis import HealthCheck, settings
    from hypothesis.errors import InvalidArgument

    try:
        settings.get_profile(LONG_PROFILE)
    except InvalidArgument:
        settings.register_profile(
            LONG_PROFILE,
            max_examples=LONG_MAX_EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
