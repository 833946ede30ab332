"""One local Spark session for the Spark tests (starting one takes seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from iqstate_spark.session import local_session

    session = local_session("iqstate-tests")
    yield session
    session.stop()
