"""Fixtures for runtime tests: applications that are closed after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from iqstate import Application


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[Callable[..., Application]]:
    created: list[Application] = []

    def make(application_id: str = "app", **kwargs: Any) -> Application:
        kwargs.setdefault("state_dir", tmp_path / "state")
        app = Application(application_id, **kwargs)
        created.append(app)
        return app

    yield make
    for app in created:
        app.close()
