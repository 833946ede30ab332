"""One local Spark session for the Spark tests (starting one takes seconds), with Spark's
Kafka connector (the distributed sink's JVM write path needs it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from iqstate_spark.session import local_session

    session = local_session("iqstate-tests", kafka=True)
    yield session
    session.stop()
