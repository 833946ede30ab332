"""`RemoteSession` shared by threads: a later query is never bounded below what any thread
already read through the session (monotonic reads, docs/cluster.md)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from iqstate_http.client import RemoteSession

from iqstate import KeyQuery, Position, StateQueryRequest

THREADS, QUERIES = 8, 2_000


class Answers:
    """Stands in for a `RemoteQueryClient`'s answers: each thread reads its own partition
    of `words` at a rising offset, beside a position of many topics (a merge takes time)."""

    def __init__(self) -> None:
        self.last_read: dict[int, int] = {}

    def query(self, request: StateQueryRequest[Any], acceptable_lag: int | None = None) -> Any:
        partition = int(threading.current_thread().name)
        offset = self.last_read[partition] = self.last_read.get(partition, 0) + 1
        topics = {f"topic-{t}": dict.fromkeys(range(8), 1) for t in range(20)}
        return _Result(Position.from_map({**topics, "words": {partition: offset}}))


class _Result:
    def __init__(self, position: Position) -> None:
        self.position = position


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Threads switch as often as CPython lets them: a race shows up in a short run."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("frequent_switches")
def test_a_session_shared_by_threads_keeps_every_read() -> None:
    answers = Answers()
    client: Any = answers
    session = RemoteSession(client)
    request = StateQueryRequest.in_store("s").with_query(KeyQuery.with_key("k"))
    behind: list[tuple[int, int, int]] = []

    def read() -> None:
        partition = int(threading.current_thread().name)
        for _ in range(QUERIES):
            session.query(request)
            held = session.position.partition_offsets("words").get(partition, 0)
            if held < answers.last_read[partition]:
                behind.append((partition, held, answers.last_read[partition]))

    threads = [threading.Thread(target=read, name=str(number)) for number in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert behind == [], "a read was lost from the session's position"
    final = session.position.partition_offsets("words")
    assert final == {partition: QUERIES for partition in range(THREADS)}
