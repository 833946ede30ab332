"""`kept_puts` answers, before a batch is written, which of its puts a store with a
retention keeps: checked against what the stores hold after each put, and their `keeps`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from iqstate.context import StateStoreContext
from iqstate.engines.memory import MemoryKeyValueStore, MemoryWindowStore
from iqstate.kept_puts import kept_puts
from iqstate.session_store import LayeredSessionStore
from iqstate.versioned_store import LayeredVersionedStore

times = st.lists(st.integers(-5, 30), max_size=10)
"""Times close together, so that puts exactly the retention apart are common."""


def opened(store: Any) -> Any:
    store.init(StateStoreContext(application_id="app", store_name="s", partition=0))
    return store


def versioned(retention: int) -> Any:
    return opened(LayeredVersionedStore(MemoryKeyValueStore("s"), retention))


def window(retention: int) -> Any:
    return opened(MemoryWindowStore("s", 1, retention))


def session(retention: int) -> Any:
    return opened(LayeredSessionStore(MemoryKeyValueStore("s"), retention))


def put_version(store: Any, key: bytes, time: int) -> bool:
    store.put(key, b"v", time)
    return store.get(key, time) is not None


def put_window(store: Any, key: bytes, time: int) -> bool:
    store.put(key, b"v", time)
    with store.fetch(key, time, time) as found:
        return bool(list(found))


def put_session(store: Any, key: bytes, time: int) -> bool:
    store.put(key, b"v", time - 1, time)
    with store.fetch_sessions(key, time - 1, time - 1) as found:
        return bool(list(found))


PUTS: dict[str, tuple[Callable[[int], Any], Callable[[Any, bytes, int], bool], bool]] = {
    "versioned": (versioned, put_version, True),
    "window": (window, put_window, False),
    "session": (session, put_session, False),
}
"""Each store type: how to make one, a put that says whether the store holds it right
after, and whether a time exactly the retention behind the newest is kept."""


@given(
    kind=st.sampled_from(sorted(PUTS)),
    retention=st.integers(1, 12),
    before=times,
    batch=times,
)
# A put exactly the retention behind the newest, within the batch and behind the stream time
@example(kind="versioned", retention=5, before=[], batch=[10, 5])
@example(kind="versioned", retention=5, before=[10], batch=[5, 4])
@example(kind="window", retention=5, before=[], batch=[10, 5])
@example(kind="window", retention=5, before=[10], batch=[6, 5])
@example(kind="session", retention=5, before=[], batch=[10, 5])
@example(kind="session", retention=5, before=[10], batch=[6, 5])
def test_the_puts_said_kept_are_those_the_store_keeps_put_by_put(
    kind: str, retention: int, before: list[int], batch: list[int]
) -> None:
    make, put, kept_at_boundary = PUTS[kind]
    store = make(retention)
    for number, time in enumerate(before):  # the stream time the batch starts from
        put(store, b"before%d" % number, time)
    predicted = kept_puts(batch, store.keeps, retention, kept_at_boundary=kept_at_boundary)
    said, held = [], []
    for number, time in enumerate(batch):
        said.append(store.keeps(time))
        held.append(put(store, b"batch%d" % number, time))
    assert said == held  # `keeps` before a put says what the put does
    assert (predicted or [True] * len(batch)) == held
    assert predicted is None or not all(predicted)  # None exactly when all are kept


def test_a_session_store_without_retention_keeps_nothing() -> None:
    store = session(0)
    assert kept_puts([5, 6], store.keeps, 0, kept_at_boundary=False) == [False, False]
