"""Shared test configuration: the default hypothesis profile (no deadline; iqstate's pytest
plugin defines `long`, for `--hypothesis-profile=long`), and a real Apache Kafka broker for
the tests that ask for one."""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from iqstate import store_exceptions
from iqstate.repeated_lines import RepeatedLines

if TYPE_CHECKING:
    from iqstate_kafka.testing import LocalBroker

settings.register_profile("default", deadline=None)
settings.load_profile("default")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """One Apache Kafka broker (KRaft, loopback) for the whole run, started on first use.

    Its jars come from Maven Central through `mvn` the first time (then from the cache);
    it is stopped when the run ends, however it ends.
    """
    from iqstate_kafka.testing import LocalBroker

    with LocalBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """`unique_name(label)`: a name no other test (or call) gets, in Kafka's topic alphabet.

    Built from the test's name, so topics and application ids on the shared broker say which
    test made them.
    """
    test = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:60].strip("-")
    run = uuid.uuid4().hex[:8]
    counter = itertools.count()

    def make(label: str) -> str:
        return f"{test}-{label}-{run}-{next(counter)}"

    return make


@pytest.fixture
def store_exception_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store exceptions' log with no line held back by an earlier test's (its filter
    passes each kind of line once per 30 s, process-wide)."""
    fresh = RepeatedLines(store_exceptions.repeats_of)
    monkeypatch.setattr(store_exceptions.logger, "filters", [fresh])
